"""The public change feed: GET /api/v1/changes, rendered at read time from current visibility (docs/architecture.md)."""

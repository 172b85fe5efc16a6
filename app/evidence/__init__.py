"""Evidence at the commit (docs/domain.md): publication of reports whose evidence was pending, and the worker's
re-check."""

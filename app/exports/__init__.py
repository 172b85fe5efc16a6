"""Bulk export: one consistent snapshot of all public data, built by the worker and served at /exports/ (docs/architecture.md)."""

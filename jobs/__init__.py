"""arq lives here and only here (docs/domain.md §12, decision 2): worker settings, job functions and the enqueue helper."""

"""arq lives here and only here (product decision 2): worker settings, job functions and the enqueue helper."""

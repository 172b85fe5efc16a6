"""Earned trust (docs/domain.md "Earned trust"): what became of each reporter's findings (`outcomes.py`, kept by the
worker), the signal it gives an account, a tool rule and a model (`signal.py`), and the public precision page."""

"""Coordinated disclosure (docs/domain.md "Coordinated disclosure"): the clock that publishes, the public ledger,
and the people who may change a clock. The hold itself is on the report path (app/reports/embargo.py)."""

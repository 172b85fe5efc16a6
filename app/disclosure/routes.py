"""Coordinated disclosure's routes, gathered: the public ledger and the changes people make to a clock."""

from __future__ import annotations

from starlette.routing import BaseRoute

from app.disclosure import actions, ledger

routes: list[BaseRoute] = [*ledger.routes, *actions.routes]

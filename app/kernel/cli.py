"""Building the `tarakan` command line: each feature adds its commands with these two helpers; the composition
root (`app.cli`) owns the parser and runs the chosen handler."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[argparse.Namespace], Awaitable[int] | int]


def command(sub: Any, name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
    """A subcommand `name` under `sub` that runs `handler`."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    parser.set_defaults(handler=handler)
    return parser


def group(sub: Any, name: str, help: str, *, metavar: str = "ACTION") -> Any:
    """The command group `name` (e.g. `repos`) under `sub`, created on first use: several features may add their
    actions to one group. Returns the group's subparsers."""
    existing = sub.choices.get(name)
    if existing is not None:
        return existing._tarakan_actions
    parser = sub.add_parser(name, help=help, description=help)
    actions = parser.add_subparsers(dest=f"{name}_command", required=True, metavar=metavar)
    parser._tarakan_actions = actions
    return actions

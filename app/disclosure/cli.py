"""`tarakan disclosures`: the clock run now (`publish-due [--now ISO-8601]`) and the open embargoes listed."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    disclosures = sub.add_parser("disclosures", help="coordinated disclosure", description="coordinated disclosure")
    disclosures.add_subparsers(dest="disclosures_command", required=True, metavar="ACTION")

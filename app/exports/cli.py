"""`tarakan export [--out DIR]`: write one bulk export (docs/operations.md "Bulk export")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from app.exports import service
from app.kernel.cli import command


async def _export(args: argparse.Namespace) -> int:
    if args.out is None:
        # what the worker does: a new export in EXPORT_DIR, served by the web, older ones pruned
        summary = await service.rebuild_export()
        manifest = service.read_manifest(service.export_dir() / summary["export"])
        print(f"export {summary['export']} written to {service.export_dir()}")
    else:
        manifest = await service.write_export(Path(args.out))
        print(f"export written to {args.out}")
    print(service.describe(manifest))
    print(f"changes_cursor {json.dumps(manifest.changes_cursor)}")
    return 0


def register(sub: Any) -> None:
    parser = command(
        sub, "export", _export, "write one consistent snapshot of all public data (gzipped NDJSON and a manifest)"
    )
    parser.add_argument(
        "--out", metavar="DIR", default=None,
        help="a new or empty directory to write into (default: a new export in $EXPORT_DIR, as the worker builds)",
    )  # fmt: skip

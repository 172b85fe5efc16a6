"""Reading an export back, as a mirror would: the manifest and every record of each file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from app.exports import service


def manifest(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / service.MANIFEST).read_text())
    return data


def records(directory: Path, name: str) -> list[dict[str, Any]]:
    with gzip.open(directory / name, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def everything(directory: Path) -> str:
    """Every file of the export decompressed, for "this text appears nowhere" checks."""
    text = (directory / service.MANIFEST).read_text()
    for name in service.FILE_NAMES:
        with gzip.open(directory / name, "rt", encoding="utf-8") as body:
            text += body.read()
    return text

"""Jinja environment: autoescape for .html, .xml and .svg (titles and repository names are attacker-controlled)."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.templating import Jinja2Templates

from app.kernel.config import settings
from app.kernel.urls import finding_path, infestation_path, path_for, repo_path, static_path

ROOT = Path(__file__).resolve().parents[2]

environment = Environment(
    loader=FileSystemLoader(str(ROOT / "templates")),
    autoescape=select_autoescape(enabled_extensions=("html", "xml", "svg", "atom"), default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates = Jinja2Templates(env=environment)
# URL builders, registered once (autoescaping still applies to what they return: plain str).
environment.globals.update(
    repo_path=repo_path,
    infestation_path=infestation_path,
    finding_path=finding_path,
    path_for=path_for,
    static_path=static_path,
)


def atlas_delay_seconds() -> int:
    """How long a new report may take to reach the atlas: the hot-key interval (docs/domain.md §5.5)."""
    return settings().hot_key_interval_seconds


environment.globals["atlas_delay_seconds"] = atlas_delay_seconds

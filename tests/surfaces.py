"""Every public surface a finding can appear on, walked as an anonymous visitor: the repository's page, twin, SARIF,
badge and feed, the home page, the atlas, search, the change feed, the sitemap and its children, and a fresh bulk
export. Shared by the tests of `publishable` (a pending report, an embargoed finding): each asserts what is absent
before and present after."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import httpx
import pytest

from app.exports import service as exports


def export_into(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The export directory of one test (its `export_dir` fixture): under its tmp_path, caches cleared."""
    monkeypatch.setenv("EXPORT_DIR", str(tmp_path / "exports"))
    exports.clear_caches()
    return tmp_path / "exports"


def public_surfaces(slug: str, key: str, search: str) -> tuple[str, ...]:
    """The surfaces of repository `slug` (host/owner/name), of pattern `key`, and a search for `search`."""
    return (
        f"/repos/{slug}",
        f"/repos/{slug}.json",
        f"/repos/{slug}/findings.sarif",
        f"/repos/{slug}/badge.svg",
        f"/repos/{slug}/reports.atom",
        "/",
        "/index.json",
        "/infestations.json",
        f"/infestations/{key}.json",
        f"/infestations/{key}/instances.json",
        "/infestations.atom",
        f"/search.json?q={search}",
        "/api/v1/changes?limit=1000",
        "/sitemap.xml",
    )


async def every_public_body(client: httpx.AsyncClient, surfaces: tuple[str, ...]) -> str:
    """Every surface's body (each a 200 or a 404), the sitemap's children, and a fresh export's findings and
    repositories, as one text."""
    bodies = []
    for path in surfaces:
        response = await client.get(path)
        assert response.status_code in (200, 404), (path, response.status_code)
        bodies.append(response.text)
        if path == "/sitemap.xml":
            for child in re.findall(r"<loc>[^<]*?(/sitemap/[^<]+)</loc>", response.text):
                bodies.append((await client.get(child)).text)
    await exports.rebuild_export()
    for name in ("findings.ndjson.gz", "repositories.ndjson.gz"):
        served = await client.get(f"/exports/{name}")
        assert served.status_code == 200, name
        bodies.append(gzip.decompress(served.content).decode())
    return "\n".join(bodies)

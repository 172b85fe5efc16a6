"""A page whose answer depends on `HX-Request` or `HX-History-Restore-Request` names both in `Vary`, so a shared
cache never serves the fragment to a history restore or a full page to an htmx swap."""

from __future__ import annotations

import httpx

from e2e.seed import seed_pattern

FRAGMENT = {"HX-Request": "true"}
RESTORE = {"HX-Request": "true", "HX-History-Restore-Request": "true"}


def varies_on(response: httpx.Response) -> set[str]:
    return {name.strip().lower() for name in response.headers.get("vary", "").split(",")}


async def test_pages_that_answer_htmx_fragments_vary_on_both_htmx_headers(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Weak hash for passwords", repos=2)
    for path in ("/infestations", f"/infestations/{seeded.key}/instances"):
        plain, fragment, restore = [await client.get(path, headers=h) for h in ({}, FRAGMENT, RESTORE)]
        # the answer depends on each header: a fragment for a swap, the whole page for a restore
        assert "<html" in plain.text and "<html" not in fragment.text and "<html" in restore.text, path
        for response in (plain, fragment, restore):
            assert response.status_code == 200, path
            assert {"hx-request", "hx-history-restore-request"} <= varies_on(response), (path, response.headers)
    show = await client.get(f"/infestations/{seeded.key}")
    assert {"hx-request", "hx-history-restore-request"} <= varies_on(show)

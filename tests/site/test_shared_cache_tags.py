"""The shared cache's tags (issue 26, Deliver 3): every cacheable anonymous page names what it shows in `xkey`
(app.kernel.shared_cache), with `s-maxage` only when it does; a privileged answer is `private, no-store` untagged."""

from __future__ import annotations

import httpx

from app.kernel.web import PRIVATE_CACHE, PUBLIC_CACHE, SHARED_CACHE
from e2e.seed import seed_pattern
from tests import factories
from tests.moderation.support import act_as
from tests.sql import rows


def tags(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == SHARED_CACHE
    return set(response.headers["xkey"].split())


async def test_pages_name_what_they_show_and_privileged_answers_carry_no_tags(client: httpx.AsyncClient) -> None:
    seeded = await seed_pattern("Tagged pattern", repos=2)
    pattern = f"p:{seeded.key}"
    repositories = {f"r:{r.id}" for r in seeded.repositories}
    for path in ("/infestations", "/infestations.json", "/", "/index.json", "/infestations.atom"):
        assert {"atlas", pattern} <= tags(await client.get(path)), path
    for path in (f"/infestations/{seeded.key}", f"/infestations/{seeded.key}.json"):
        assert tags(await client.get(path)) == {"atlas", pattern, *repositories}, path
    for path in ("/", "/index.json"):  # the recent reports' repositories: a report off the atlas purges only those
        assert tags(await client.get(path)) == {"atlas", pattern, *repositories}, path
    assert {"atlas", pattern} <= tags(await client.get(f"/infestations/{seeded.key}/instances.json"))
    fragment = await client.get("/fragments/home-infestations")
    assert fragment.headers["Cache-Control"] == "public, max-age=0, s-maxage=300"
    assert {"atlas", pattern} <= set(fragment.headers["xkey"].split())

    repo = seeded.repositories[0]
    slug = f"{repo.host}/{repo.owner}/{repo.name}"
    # not `atlas`: takedowns elsewhere keep them; the repository page lists the pattern's spread, which another
    # repository's report moves, so it names the pattern too
    for path in (f"/repos/{slug}", f"/repos/{slug}.json"):
        assert tags(await client.get(path)) == {f"r:{repo.id}", pattern}, path
    for path in (f"/repos/{slug}/badge.svg", f"/repos/{slug}/reports.atom"):
        assert tags(await client.get(path)) == {f"r:{repo.id}"}, path
    [occurrence] = await rows(
        "SELECT f.id, f.public_id FROM scan_findings f JOIN scans s ON s.id = f.scan_id WHERE s.repository_id = :r",
        r=repo.id,
    )
    expected = {f"r:{repo.id}", f"o:{occurrence['id']}"}
    assert tags(await client.get(f"/repos/{slug}/findings.sarif")) == expected
    for path in (f"/findings/{occurrence['public_id']}", f"/findings/{occurrence['public_id']}.json"):
        assert tags(await client.get(path)) == {*expected, pattern}, path  # it links the pattern while it spreads

    # a page that names nothing promises no shared lifetime
    search = await client.get("/search?q=acme")
    assert search.headers["Cache-Control"] == PUBLIC_CACHE and "xkey" not in search.headers

    await act_as(client, await factories.create_account(platform_role="moderator", state="active"))
    for path in (f"/repos/{slug}", f"/repos/{slug}.json", f"/findings/{occurrence['public_id']}"):
        privileged = await client.get(path)
        assert privileged.status_code == 200, path
        assert privileged.headers["Cache-Control"] == PRIVATE_CACHE and "xkey" not in privileged.headers, path

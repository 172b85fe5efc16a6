"""The tags a shared page cache (Varnish with xkey) purges by: every cacheable public page names what it shows
(docs/scaling.md "Shared cache"). One place for the tag words, so pages and purges cannot disagree."""

from __future__ import annotations

from collections.abc import Iterable

# The response header Varnish's xkey module indexes (space-separated tags); Varnish strips it before clients.
XKEY_HEADER = "xkey"
# The atlas pages (index, home fragment, show pages, ledgers, their twins): a rollup refresh or a takedown of any
# finding on the atlas purges it. Repository pages do not carry it, so a takedown does not empty them all.
ATLAS_TAG = "atlas"
# The sitemaps that name repositories and findings (their pages and the one small urlset): every takedown that touches
# a repository's pages purges them, so a taken-down name leaves them at the next request; a new report does not (a
# new URL reaches crawlers within s-maxage, docs/scaling.md "Shared cache").
SITEMAP_TAG = "sitemap"


def pattern_tag(pattern_key: str) -> str:
    return f"p:{pattern_key}"


def repository_tag(repository_id: int) -> str:
    return f"r:{repository_id}"


def occurrence_tag(occurrence_id: int) -> str:
    return f"o:{occurrence_id}"


def xkey_headers(tags: Iterable[str]) -> dict[str, str]:
    """The header naming `tags` (deduplicated, in a stable order); empty when there are none."""
    unique = sorted(set(tags))
    return {XKEY_HEADER: " ".join(unique)} if unique else {}

"""Sitemap knobs, read from the environment at call time.

These belong in `app.config.Settings` (the integrator moves them there); until then they are parsed here with the
same rules (integers, validated, clear error naming the variable).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import _int, settings
from app.registry.stats import ttl_from_env

# Protocol limits (sitemaps.org): 50,000 URLs per file; the design's threshold for the index is 20,000 listed.
PROTOCOL_MAX_URLS = 50_000
CHILD_PAGE_SIZE = 10_000


@dataclass(frozen=True)
class SeoSettings:
    base_url: str
    index_threshold: int  # listed repositories at which /sitemap.xml becomes a sitemapindex
    max_urls: int  # cap of the single urlset (the benchmark raises it to stream 10^6 URLs in one file)
    cache_ttl: float  # seconds the child page boundaries are cached (0 disables)


def seo_settings() -> SeoSettings:
    return SeoSettings(
        base_url=settings().base_url,
        index_threshold=_int("SITEMAP_INDEX_THRESHOLD", 20_000, minimum=1),
        max_urls=_int("SITEMAP_MAX_URLS", PROTOCOL_MAX_URLS, minimum=1),
        cache_ttl=sitemap_cache_ttl(),
    )


def sitemap_cache_ttl() -> float:
    return ttl_from_env("SITEMAP_CACHE_TTL", 60.0)

"""Sitemap knobs, from `app.kernel.config.settings()` (read at call time so tests and operators can change them)."""

from __future__ import annotations

from dataclasses import dataclass

from app.kernel.config import settings

# Protocol limits (sitemaps.org): 50,000 URLs per file; our threshold for the index is 20,000 listed (docs/domain.md §13 "Sitemap").
PROTOCOL_MAX_URLS = 50_000
CHILD_PAGE_SIZE = 10_000


@dataclass(frozen=True)
class SeoSettings:
    base_url: str
    index_threshold: int  # listed repositories at which /sitemap.xml becomes a sitemapindex
    max_urls: int  # cap of the single urlset (the benchmark raises it to stream 10^6 URLs in one file)


def seo_settings() -> SeoSettings:
    cfg = settings()
    return SeoSettings(
        base_url=cfg.base_url,
        index_threshold=cfg.sitemap_index_threshold,
        max_urls=cfg.sitemap_max_urls,
    )


def sitemap_cache_ttl() -> float:
    """Seconds the child page boundaries are cached (0 disables)."""
    return settings().sitemap_cache_ttl

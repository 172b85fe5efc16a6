"""Typed BeautifulSoup helpers for the site's server-side tests (a missing element fails loudly)."""

from __future__ import annotations

import httpx
from bs4 import BeautifulSoup, Tag


def soup(response: httpx.Response | str) -> BeautifulSoup:
    return BeautifulSoup(response if isinstance(response, str) else response.text, "lxml")


def one(node: BeautifulSoup | Tag, selector: str) -> Tag:
    found = node.select_one(selector)
    assert found is not None, f"no element matches {selector!r}"
    return found


def maybe(node: BeautifulSoup | Tag, selector: str) -> Tag | None:
    return node.select_one(selector)


def attr(tag: Tag, name: str) -> str:
    value = tag.get(name)
    assert isinstance(value, str), f"{name!r} is not a single attribute on {tag.name}"
    return value


def text(node: BeautifulSoup | Tag, selector: str) -> str:
    return one(node, selector).get_text(strip=True)


def attrs(node: BeautifulSoup | Tag, selector: str, name: str) -> list[str]:
    return [attr(tag, name) for tag in node.select(selector)]

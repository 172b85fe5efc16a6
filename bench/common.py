"""What the benchmark scripts share: percentiles and their section of docs/benchmarks.md (each script rewrites
only its own section). Real `tarakan` processes come from tests/harness.py, as in the tests."""

from __future__ import annotations

from tests.harness import ROOT


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_section(markdown: str, heading: str) -> None:
    """Replace (or append) only `heading`'s section of docs/benchmarks.md; other sections stay as they are."""
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n\nFigures measured on this project's machines.\n"
    start = text.find(heading + "\n")
    if start < 0:
        start = text.find(heading + " ")
    if start >= 0:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + markdown.rstrip() + "\n" + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + markdown.rstrip() + "\n"
    path.write_text(text)

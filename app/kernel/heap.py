"""The collector's settings of a long-lived process (web and worker), set once its code is imported and its pools
are open (docs/benchmarks.md "Public pages" and "Public pages when the cache misses")."""

from __future__ import annotations

import gc

GC_YOUNG_THRESHOLD = 7000  # allocations between young collections (Python's default: 700)


def settle() -> None:
    """The ~140,000 objects of the imported code live as long as the process: out of the collector's sight, a full
    collection no longer walks them (it stopped every request for 80-250 ms a few times a minute under load). A
    young collection walks the objects in flight whatever their number, and every tenth one the older generation
    too: ten times fewer walks, each about as long (a miss render 15-20 % cheaper)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

"""The SQL-free parts of the infestation reads and the projection (docs/domain.md §5.7, §13 "Backfill"): the
pattern key a route accepts, the guarded map of a pattern whose sample was taken down, the oldest refresh a list
shows, and the locks: every key falls in exactly one backfill range, whose bucket locks include the bucket a
refresh of that key takes (so a refresh and a backfill of one key never run at once), in the order a drain takes
them (bench/mutation.py holds app/infestations/queries.py and projection.py to these). No database."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta

from app.infestations.keys import Keys
from app.infestations.models import COUNTS, UNKNOWN_TITLE
from app.infestations.projection import _bucket, _buckets, _lock_key_params, key_ranges, lock_order
from app.infestations.queries import _oldest, guarded_map, parse_pattern_key
from app.infestations.rows import INFESTATION_KEYS

HEX = "0123456789abcdef"
KEY = "ab" + "0" * 62
# a key of every bucket (pattern keys are sha256 hex), and keys that are not, sorting below or above every hex key
HEX_KEYS = [f"{a}{b}" + c * 62 for a in HEX for b in HEX for c in "0f"] + ["00", "ff", "ab"]
EDGE_KEYS = ["", "!!", "/x", "g0" + "0" * 62, "zz", "~~"]
# not hex, sorting between hex keys: each still falls in one range (its "other" bucket is not that range's: no
# pattern key looks like this, docs/domain.md §13 "Backfill")
BETWEEN_KEYS = ["a", "f", "0g", "a-", "AB" + "0" * 62]


def _covering(ranges: list[Keys], key: str) -> list[Keys]:
    return [r for r in ranges if r.lo <= key and (r.hi is None or key < r.hi)]


def test_a_pattern_key_is_64_lowercase_hex_characters() -> None:
    assert parse_pattern_key(KEY) == KEY
    for bad in (KEY.upper(), KEY[:-1], KEY + "0", KEY + "\n", " " + KEY[1:], "x" + KEY[1:], b"ab" * 32, None, 7):
        assert parse_pattern_key(bad) is None, bad


def test_a_pattern_whose_sample_was_taken_down_keeps_its_title_but_not_its_sample() -> None:
    sample = uuid.uuid4()
    row = {key: None for key in INFESTATION_KEYS} | {
        "pattern_key": KEY,
        "title": "SQL injection",
        "severity": "high",
        "sample_file_path": "app/db.py",
        "sample_occurrence_public_id": sample,
        "repo_count": 3,
    }
    shown = guarded_map(row | {"sample_visible": True})
    assert (shown["title"], shown["sample_file_path"], shown["sample_occurrence_public_id"]) == (
        "SQL injection",
        "app/db.py",
        str(sample),
    )
    assert shown["repo_count"] == 3 and all(isinstance(shown[k], int) for k in COUNTS)
    hidden = guarded_map(row | {"sample_visible": False})
    assert (hidden["title"], hidden["severity"], hidden["repo_count"]) == ("SQL injection", "high", 3)
    assert hidden["sample_file_path"] is None and hidden["sample_occurrence_public_id"] is None
    assert hidden.keys() == shown.keys() == set(INFESTATION_KEYS)
    assert guarded_map(row | {"title": None, "sample_visible": True})["title"] == UNKNOWN_TITLE


def test_a_list_says_its_oldest_refresh() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert _oldest([now, None, now - timedelta(hours=2), now - timedelta(hours=1)]) == now - timedelta(hours=2)
    assert _oldest([None, now]) == now
    assert _oldest([None, None]) is None
    assert _oldest([]) is None


def test_the_bucket_of_a_key_is_its_first_two_hex_digits_else_other() -> None:
    assert [_bucket(k) for k in (KEY, "00", "ff" + "f" * 62, "9a", "abz")] == ["ab", "00", "ff", "9a", "ab"]
    for other in ("", "a", "f", "g0" + "0" * 62, "0g", "AB" + "0" * 62, "a-", "zz"):
        assert _bucket(other) == "other", other
    assert _lock_key_params(KEY) == {"key": KEY, "bucket": "ab"}
    assert _lock_key_params("x") == {"key": "x", "bucket": "other"}


def test_keys_are_locked_other_bucket_first_then_in_key_order() -> None:
    keys = ["ff" + "0" * 62, "zz", KEY, "00" + "0" * 62, "", "0g", "ab"]
    assert sorted(keys, key=lock_order) == ["", "0g", "zz", "00" + "0" * 62, "ab", KEY, "ff" + "0" * 62]


def test_every_key_falls_in_exactly_one_range_which_locks_its_bucket() -> None:
    for count in (1, 2, 3, 7, 16, 100, 255, 256):
        ranges = key_ranges(count)
        assert len(ranges) == count
        assert ranges[0].lo == "" and ranges[-1].hi is None
        assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges))  # contiguous
        for key in HEX_KEYS + EDGE_KEYS:
            (covering,) = _covering(ranges, key)
            assert _bucket(key) in _buckets(covering), (count, key)
        assert all(len(_covering(ranges, key)) == 1 for key in BETWEEN_KEYS)
        # each bucket is locked by one range only: two ranges never wait on each other
        locked = [b for r in ranges for b in _buckets(r) if b != "other"]
        assert sorted(locked) == [f"{n:02x}" for n in range(256)]


def test_the_number_of_ranges_is_clamped_to_1_through_256() -> None:
    assert key_ranges(0) == key_ranges(-5) == [Keys(lo="", hi=None)]
    assert key_ranges(1000) == key_ranges(256)
    assert [(r.lo, r.hi) for r in key_ranges(4)] == [("", "40"), ("40", "80"), ("80", "c0"), ("c0", None)]
    assert [(r.lo, r.hi) for r in key_ranges(256)[:2]] == [("", "01"), ("01", "02")]
    assert (key_ranges(256)[-1].lo, key_ranges(3)[1].lo, key_ranges(3)[2].lo) == ("ff", "55", "aa")


def test_the_buckets_of_a_range() -> None:
    everything = _buckets(Keys(lo="", hi=None))
    assert everything == ["other", *(f"{n:02x}" for n in range(256))]
    assert _buckets(Keys(lo="", hi="02")) == ["other", "00", "01"]
    assert _buckets(Keys(lo="fe", hi=None)) == ["other", "fe", "ff"]
    assert _buckets(Keys(lo="40", hi="43")) == ["40", "41", "42"]  # a middle range holds no non-hex key

"""The atlas's answer types say exactly the keys the query modules produce, in their order (docs/domain.md §5.7
the infestation map, §4.4 instance entries)."""

from __future__ import annotations

from app.infestations.rows import INFESTATION_KEYS, INSTANCE_KEYS, Infestation, Instance


def test_the_map_and_ledger_types_name_the_query_keys_in_order() -> None:
    assert Infestation.__struct_fields__ == INFESTATION_KEYS
    assert Instance.__struct_fields__ == INSTANCE_KEYS

"""Settings are read at call time (docs/operations.md): an operator's or a test's change of the environment is
seen by the next call, although `settings()` parses each distinct set of values once."""

from __future__ import annotations

import inspect
import re

import pytest

from app.kernel import config
from app.kernel.config import ConfigError, settings


def test_a_change_to_the_environment_is_seen_at_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    before = settings()
    monkeypatch.setenv("REFUSED_PER_MINUTE", "7")
    monkeypatch.setenv("BASE_URL", "https://tarakan.example/")
    changed = settings()
    assert (changed.refused_per_minute, changed.base_url) == (7, "https://tarakan.example")
    monkeypatch.delenv("REFUSED_PER_MINUTE")
    assert settings().refused_per_minute == 60  # unset: the default
    monkeypatch.undo()
    assert settings() == before


def test_an_invalid_value_is_refused_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_POOL_SIZE", "none")
    for _ in range(2):
        with pytest.raises(ConfigError, match="DB_POOL_SIZE must be an integer"):
            settings()


def test_every_variable_the_settings_read_is_in_their_cache_key() -> None:
    """A variable read but not listed would keep its first value for the life of the process."""
    read = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', inspect.getsource(config._read_settings)))
    assert read == set(config.SETTINGS_ENV)

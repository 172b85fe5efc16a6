"""The two accounts most moderation tests act with (the console's tests also sign the moderator in)."""

from __future__ import annotations

import pytest

from app.accounts.models import Account
from tests.moderation.support import make_account


@pytest.fixture
async def moderator() -> Account:
    return await make_account("mod", platform_role="moderator")


@pytest.fixture
async def submitter() -> Account:
    return await make_account("agent")

"""The moderation console's rows, as its reads return them and its pages and forms show them (every row whatever its
visibility or listing). Plain structs built from the reads' columns: nothing is converted on the way."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from msgspec import Struct

from app.reports.embargo import DisclosureExtension


class ConsoleReport(Struct, kw_only=True):
    id: int
    commit_sha: str
    visibility: str
    review_status: str
    findings_count: int
    inserted_at: datetime
    moderation_reason: str | None
    reviewed_at: datetime | None
    host: str
    owner: str
    name: str
    listing_status: str
    submitter_handle: str


class ConsoleRepository(Struct, kw_only=True):
    id: int
    host: str
    owner: str
    name: str
    listing_status: str
    status: str
    scan_count: int
    open_findings_count: int
    inserted_at: datetime
    forge_redirect: str | None
    forge_missing_runs: int


class Maintainership(ConsoleRepository, kw_only=True):
    """A repository and one of its maintainers (`handle`), as the form ending the maintainership shows them."""

    handle: str


class ConsoleAccount(Struct, kw_only=True):
    id: int
    handle: str
    platform_role: str
    trust_tier: str
    state: str
    last_seen_at: datetime | None
    inserted_at: datetime


class SignalledAccount(ConsoleAccount, kw_only=True):
    """An account with its stored reporter signal and how many of its findings are held for review."""

    precision: float
    decided: int
    gated: bool
    pin: str  # "clear" when none
    held: int


class ConsoleAuditEvent(Struct, kw_only=True):
    id: int
    action: str
    subject_type: str
    subject_id: str
    before: dict[str, Any] | None  # open JSON: each action records its own keys (app.kernel.audit)
    after: dict[str, Any] | None
    reason: str | None
    notes: str | None
    inserted_at: datetime
    actor_handle: str | None  # None: a deleted account, or the registry or the operator


class ClockSubject(Struct, kw_only=True):
    """One finding's disclosure clock, open or closed, as a moderator's form about it shows it."""

    public_id: uuid.UUID  # the canonical finding's
    severity: str | None
    title: str
    host: str
    owner: str
    name: str
    reported_at: datetime
    deadline: datetime
    canonical_finding_id: int
    state: str


class OpenEmbargo(ClockSubject, kw_only=True):
    """An open coordinated-disclosure embargo in the console's list, with an occurrence of its finding."""

    extensions: list[DisclosureExtension]
    occurrence: uuid.UUID | None

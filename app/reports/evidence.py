"""Evidence at the commit (docs/domain.md "Evidence at the commit"): is a report's commit in its repository's
default-branch history, is each finding's file there at that commit, are its lines inside the file, and the
anchor of its lines. Asked of the caches first (`forge_commits`, `forge_files`: one read), then of the forge
(`app.forge.api`: raw files first, a 200 proves commit and path), what was learnt written back in its own short
transaction. Used at submission (`app.reports.evidence_gate`) and by the worker's re-check of pending reports."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import TextClause, text

from app.forge import api as forge
from app.forge import lines
from app.kernel import db
from app.kernel.sql import Fragment, statement

State = Literal["confirmed", "refused", "pending"]
RAW_AT_ONCE = 4  # raw file reads of one report in flight at once


@dataclass(frozen=True)
class FindingRef:
    file_path: str
    line_start: int | None
    line_end: int | None


@dataclass(frozen=True)
class FindingEvidence:
    state: State
    anchor: str | None
    field: str | None  # the finding's field a refusal names: "file", "line_start" or "line_end"; None otherwise
    reason: str | None  # "not found in github.com/acme/widget at abc1234", "line 90 is past the end (40 lines)"


@dataclass(frozen=True)
class EvidenceResult:
    commit: State
    committed_at: datetime | None
    reason: str | None  # why the commit was refused
    findings: list[FindingEvidence]

    @property
    def decided(self) -> bool:
        return self.commit != "pending" and all(f.state != "pending" for f in self.findings)


# the repository, its commit's cached row and its paths' rows, in one read (by id, or by name at submission)
_KNOWN = """
SELECT r.id AS repository_id, r.default_branch, c.path, c.present, c.committed_at, c.line_digests
FROM repositories r LEFT JOIN LATERAL (
    SELECT NULL AS path, present, committed_at, NULL::bytea AS line_digests
    FROM forge_commits WHERE repository_id = r.id AND commit_sha = :sha
    UNION ALL
    SELECT path, present, NULL, line_digests
    FROM forge_files WHERE repository_id = r.id AND commit_sha = :sha AND path = ANY(CAST(:paths AS text[]))
) c ON true
WHERE {which}
"""
_KNOWN_BY_ID = statement(_KNOWN, which=Fragment("r.id = :rid"))
_KNOWN_BY_NAME = statement(_KNOWN, which=Fragment("r.host = :host AND r.owner = :owner AND r.name = :name"))
# What a check learnt, in one statement (one round trip in autocommit: both inserts are idempotent); the commit's
# row only when `:commit` (a confirmed commit learnt now), the files' rows for `:paths`
_CACHE = text("""
WITH known_commit AS (
  INSERT INTO forge_commits (repository_id, commit_sha, present, committed_at)
  SELECT CAST(:rid AS bigint), CAST(:sha AS text), true, CAST(:committed_at AS timestamptz)
  WHERE CAST(:commit AS boolean)
  ON CONFLICT DO NOTHING
)
INSERT INTO forge_files (repository_id, commit_sha, path, present, line_digests)
SELECT CAST(:rid AS bigint), CAST(:sha AS text), n.path, n.present, n.digests
FROM unnest(CAST(:paths AS text[]), CAST(:presents AS boolean[]), CAST(:digests AS bytea[])) AS n(path, present, digests)
ON CONFLICT DO NOTHING
""")


@dataclass
class _File:
    """A path at the commit: present (True/False) or undecided (None); its line digests (None: too large to read
    whole, or not present)."""

    present: bool | None = None
    digests: bytes | None = None
    learnt: bool = False  # not from the cache: to write back


@dataclass
class _Commit:
    state: State = "pending"
    committed_at: datetime | None = None
    reason: str | None = None
    learnt: bool = False
    files: dict[str, _File] = field(default_factory=dict)


async def _bounded(deadline: float, *calls: Awaitable[Any]) -> list[Any]:
    """The calls' answers, None for any not done by `deadline` (cancelled)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    if not tasks:
        return []
    _done, late = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    for task in late:
        task.cancel()
    return [None if task in late or task.cancelled() or task.exception() else task.result() for task in tasks]


async def _read_cache(by: TextClause, params: dict[str, Any]) -> tuple[int, str | None, _Commit] | None:
    """The repository's id and default branch, and what the caches know of the commit; None: no such repository."""
    found = _Commit()
    async with db.statements() as primary:  # one statement on the primary: no transaction block around it
        rows = await primary.rows(by, params)
    if not rows:
        return None
    for row in rows:
        if row.present is None:
            continue  # the repository's row alone: nothing cached
        if row.path is None:
            found.state = "confirmed" if row.present else "refused"
            found.committed_at = row.committed_at
        else:
            found.files[str(row.path)] = _File(bool(row.present), row.line_digests)
    return int(rows[0].repository_id), rows[0].default_branch, found


async def _place(
    host: str, owner: str, name: str, default_branch: str | None, sha: str, deadline: float
) -> tuple[State, datetime | None, str | None]:
    """The commit in the default branch's history (a fork's commit served under this name is not), and its date."""
    where = f"{host}/{owner}/{name}"
    if default_branch is None:
        repo = await forge.repository(host, owner, name, deadline=deadline)
        if repo.outcome == "missing":
            return "refused", None, f"not found in {where}: the forge has no such repository"
        if repo.outcome != "found" or repo.value is None:
            return "pending", None, None
        default_branch = repo.value.default_branch
    placed, dated = await _bounded(
        deadline,
        forge.in_history(host, owner, name, default_branch, sha, deadline=deadline),
        forge.commit(host, owner, name, sha, deadline=deadline),
    )
    if placed is None or placed.outcome not in ("found", "missing"):
        return "pending", None, None
    if placed.outcome == "missing":
        return "refused", None, f"not found in {where}"
    if not placed.value:
        return "refused", None, f"not found in {where} (not in the history of {default_branch})"
    committed_at = dated.value.committed_at if dated is not None and dated.value is not None else None
    return "confirmed", committed_at, None


async def _raw(
    host: str, owner: str, name: str, sha: str, path: str, gate: asyncio.Semaphore, deadline: float
) -> forge.Answer[forge.RawFile]:
    async with gate:
        return await forge.raw_file(host, owner, name, sha, path, deadline=deadline)


def _judge(ref: FindingRef, known: _Commit, where: str, sha: str) -> FindingEvidence:
    if known.state == "refused":
        return FindingEvidence("refused", None, None, known.reason)
    file = known.files.get(ref.file_path, _File())
    if file.present is None or (known.state == "pending" and not file.present):
        return FindingEvidence("pending", None, None, None)
    if not file.present:
        return FindingEvidence("refused", None, "file", f"not found in {where} at {sha[:7]}")
    anchor = None
    if ref.line_start is not None and file.digests is not None:
        end = ref.line_end if ref.line_end is not None else ref.line_start
        count = lines.line_count(file.digests)
        if end > count:
            past, line = ("line_start", ref.line_start) if ref.line_start > count else ("line_end", end)
            return FindingEvidence("refused", None, past, f"line {line} is past the end ({count} lines)")
        anchor = lines.anchor(file.digests, ref.line_start, end)
    return FindingEvidence("pending" if known.state == "pending" else "confirmed", anchor, None, None)


async def check_evidence(
    repository_id: int,
    host: str,
    owner: str,
    name: str,
    default_branch: str | None,
    commit_sha: str,
    findings: Sequence[FindingRef],
    *,
    deadline: float,
    known: _Commit | None = None,
) -> EvidenceResult:
    """Each finding's evidence at `commit_sha` and the commit's: confirmed, refused (with the reason and the field
    it names) or pending (the forge failed, was slow past `deadline`, a `time.monotonic()` instant, or its rate was
    spent). Never raises for what the forge does; writes what it learnt to the caches. `known`: what the caches
    hold, when the caller read it (`check_listed`)."""
    if known is None:
        paths = sorted({f.file_path for f in findings})
        read = await _read_cache(_KNOWN_BY_ID, {"rid": repository_id, "sha": commit_sha, "paths": paths})
        known = read[2] if read is not None else _Commit()
    wanted = sorted({f.file_path for f in findings} - known.files.keys())
    gate = asyncio.Semaphore(RAW_AT_ONCE)
    calls: list[Awaitable[Any]] = [_raw(host, owner, name, commit_sha, p, gate, deadline) for p in wanted]
    if known.state == "pending":
        calls.append(_place(host, owner, name, default_branch, commit_sha, deadline))
    answers = await _bounded(deadline, *calls)
    if known.state == "pending":
        placed = answers.pop()
        if placed is not None:
            known.state, known.committed_at, known.reason = placed
            known.learnt = known.state == "confirmed"
    for path, answer in zip(wanted, answers, strict=True):
        if answer is None or answer.outcome not in ("found", "missing"):
            continue
        if answer.outcome == "missing":  # the file, or the commit: only a confirmed commit says which
            known.files[path] = _File(False, None, learnt=True)
            continue
        raw: forge.RawFile = answer.value
        assert raw is not None
        known.files[path] = _File(True, None if raw.truncated else lines.line_digests(raw.data), learnt=True)
    where = f"{host}/{owner}/{name}"
    result = EvidenceResult(
        known.state, known.committed_at, known.reason, [_judge(f, known, where, commit_sha) for f in findings]
    )
    await _write_cache(repository_id, commit_sha, known)
    return result


async def check_listed(
    host: str, owner: str, name: str, commit_sha: str, findings: Sequence[FindingRef], *, deadline: float
) -> tuple[int, EvidenceResult] | None:
    """`check_evidence` of the repository listed as host/owner/name (its row read with the caches, in one
    statement), with its id; None when it is not listed."""
    paths = sorted({f.file_path for f in findings})
    where = (host, owner, name, commit_sha)
    read = _memo.recall(where, paths)
    if read is None:
        params = {"host": host, "owner": owner, "name": name, "sha": commit_sha, "paths": paths}
        read = await _read_cache(_KNOWN_BY_NAME, params)
        if read is None:
            return None
    repository_id, default_branch, known = read
    result = await check_evidence(
        repository_id, host, owner, name, default_branch, commit_sha, findings, deadline=deadline, known=known
    )
    if known.state == "confirmed":
        _memo.keep(where, repository_id, known)
    return repository_id, result


class _Memo:
    """The confirmed commits' present files, as the caches hold them, kept in this process for MEMO_SECONDS: the
    next reports of an agent's run on the same commit and files skip the cache read (one statement and a pooled
    connection of the request's time: issue 39). Only what the caches never take back (a confirmed commit, a
    present file: their rows are never updated or deleted), and only briefly, since the name may come to mean
    another repository (a deletion, a rename)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[str, ...], tuple[float, int, datetime | None, dict[str, bytes | None]]] = (
            OrderedDict()
        )

    def recall(self, where: tuple[str, ...], paths: list[str]) -> tuple[int, str | None, _Commit] | None:
        entry = self._entries.get(where)
        if entry is None:
            return None
        at, repository_id, committed_at, files = entry
        if time.monotonic() - at > MEMO_SECONDS or not all(p in files for p in paths):
            return None
        known = _Commit("confirmed", committed_at, files={p: _File(True, files[p]) for p in paths})
        return repository_id, None, known

    def keep(self, where: tuple[str, ...], repository_id: int, known: _Commit) -> None:
        present = {p: f.digests for p, f in known.files.items() if f.present}
        now = time.monotonic()
        old = self._entries.pop(where, None)
        at = now
        if old is not None:
            self.bytes -= _size(old[3])
            if now - old[0] <= MEMO_SECONDS:  # what it knew keeps its age: a name is trusted MEMO_SECONDS at most
                at = old[0]
                present = {**old[3], **present}
        self._entries[where] = (at, repository_id, known.committed_at, present)
        self.bytes += _size(present)
        while self.bytes > self.max_bytes and self._entries:
            _where, (_at, _rid, _committed, files) = self._entries.popitem(last=False)
            self.bytes -= _size(files)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0


def forget() -> None:
    """Forget what this process remembers of the caches (tests: ids restart with the tables)."""
    _memo.clear()


def _size(files: dict[str, bytes | None]) -> int:
    return sum(len(p) + len(d or b"") + 100 for p, d in files.items())


MEMO_SECONDS = 60.0
# A 1,000-line file's digests are 32 kB: 48 MiB keeps five such files for each of ~300 runs at once (the capacity
# bench's 200 commits, round-robin, over-ran 8 MiB and read the caches at every report: docs/benchmarks.md)
MEMO_BYTES = 48 * 1024 * 1024
_memo = _Memo(MEMO_BYTES)


async def _write_cache(repository_id: int, commit_sha: str, known: _Commit) -> None:
    """What was learnt, for the next report on this commit (a file's absence only once the commit is known: a 404
    of a commit not in the forge says nothing of the file). A race with another writer keeps the first row."""
    learnt = {path: f for path, f in known.files.items() if f.learnt and (f.present or known.state == "confirmed")}
    if not learnt and not known.learnt:
        return
    params = {
        "rid": repository_id,
        "sha": commit_sha,
        "commit": known.learnt,
        "committed_at": known.committed_at,
        "paths": list(learnt),
        "presents": [f.present for f in learnt.values()],
        "digests": [f.digests for f in learnt.values()],
    }
    async with db.statements() as primary:
        await primary.rows(_CACHE, params)

"""Every model, imported once so Alembic and the drift test see the whole schema."""

from app.accounts.models import Account, ApiToken, LoginAttempt, WebSession
from app.infestations.models import (
    InfestationDirtyKey,
    InfestationPattern,
    InfestationPatternInstance,
    InfestationPatternRepo,
    InfestationPatternStatusWindow,
)
from app.kernel.audit import AuditEvent
from app.kernel.db import Base
from app.kernel.flags import RuntimeSetting
from app.maintainers.models import (
    FindingStatement,
    MaintainerClaim,
    RepositoryMaintainer,
    Webhook,
    WebhookDelivery,
)
from app.ops.models import AppSecret, InstanceLease, JobRun
from app.record.models import Change, PublishedCanonical, PublishedFinding, PublishedRepository
from app.registry.models import Repository
from app.reports.models import (
    CanonicalFinding,
    CanonicalFindingCheck,
    Disclosure,
    ForgeCommit,
    ForgeFile,
    ReportRefusal,
    Scan,
    ScanConfirmation,
    ScanFinding,
)
from app.trust.models import AccountSignal, FindingOutcome

metadata = Base.metadata

__all__ = [
    "Account",
    "AccountSignal",
    "ApiToken",
    "AppSecret",
    "AuditEvent",
    "CanonicalFinding",
    "CanonicalFindingCheck",
    "Change",
    "Disclosure",
    "FindingOutcome",
    "FindingStatement",
    "ForgeCommit",
    "ForgeFile",
    "InfestationDirtyKey",
    "InfestationPattern",
    "InfestationPatternInstance",
    "InfestationPatternRepo",
    "InfestationPatternStatusWindow",
    "InstanceLease",
    "JobRun",
    "LoginAttempt",
    "MaintainerClaim",
    "PublishedCanonical",
    "PublishedFinding",
    "PublishedRepository",
    "ReportRefusal",
    "Repository",
    "RepositoryMaintainer",
    "RuntimeSetting",
    "Scan",
    "ScanConfirmation",
    "ScanFinding",
    "WebSession",
    "Webhook",
    "WebhookDelivery",
    "metadata",
]

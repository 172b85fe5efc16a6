"""Expected failures, raised anywhere and answered in one place (`app.kernel.web.error_response`)."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every expected failure."""

    status_code = 422
    title = "Not accepted"

    def __init__(
        self,
        errors: dict[str, list[str]] | str,
        *,
        status_code: int | None = None,
        title: str | None = None,
        message: str | None = None,
    ) -> None:
        if isinstance(errors, str):
            errors = {"base": [errors]}
        self.errors = errors
        if status_code is not None:
            self.status_code = status_code
        if title is not None:
            self.title = title
        self.message = message or self.describe()
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))

    def describe(self) -> str:
        """The errors as one sentence for a person ("field: message"; `base` messages stand alone)."""
        return "; ".join(f"{k}: {', '.join(v)}" if k != "base" else ", ".join(v) for k, v in self.errors.items())

    def headers(self) -> dict[str, str]:
        """Response headers the status code requires (none by default)."""
        return {}


# One line of meaning each: the status code and the heading of its HTML page.
class ValidationError(DomainError):
    status_code, title = 422, "Not accepted"


class BadRequest(DomainError):
    status_code, title = 400, "Bad request"


class NotFound(DomainError):
    status_code, title = 404, "Not found"


class Forbidden(DomainError):
    status_code, title = 403, "Forbidden"


class Conflict(DomainError):
    status_code, title = 409, "Conflict"


class TooLarge(DomainError):
    status_code, title = 413, "Too large"


class Unauthorized(DomainError):
    """No (valid) credential: API clients are told the scheme; the HTML page offers the login form."""

    status_code, title = 401, "Log in"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="tarakan"'}


class _TryAgainLater(DomainError):
    """A refusal that says when to try again: `retry_after` seconds."""

    retry_after: int

    def headers(self) -> dict[str, str]:
        # one client's refusal must never be served to another by a shared cache
        return {"Retry-After": str(self.retry_after), "Cache-Control": "no-store"}


class RateLimited(_TryAgainLater):
    status_code, title = 429, "Too many attempts"

    def __init__(self, errors: dict[str, list[str]] | str, *, retry_after: int) -> None:
        super().__init__(errors)
        self.retry_after = retry_after


class ServiceUnavailable(_TryAgainLater):
    """A dependency (Postgres, Redis) is away or too slow: try again after `retry_after` seconds. Raised for the
    web by the outage handler in `app.main` (docs/reliability.md); never cached."""

    status_code, title = 503, "Temporarily unavailable"
    RETRY_AFTER = 10  # seconds: a database restart or failover is usually over well within this

    def __init__(
        self, errors: dict[str, list[str]] | str, *, retry_after: int = RETRY_AFTER, message: str | None = None
    ):
        super().__init__(errors, message=message)
        self.retry_after = retry_after

"""Domain errors, mapped once to HTTP: 4xx JSON bodies that name the field and the rule."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every expected failure. `errors` maps a field name to its messages."""

    status_code = 422

    def __init__(self, errors: dict[str, list[str]] | str, *, status_code: int | None = None) -> None:
        if isinstance(errors, str):
            errors = {"base": [errors]}
        self.errors = errors
        if status_code is not None:
            self.status_code = status_code
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))


class ValidationError(DomainError):
    status_code = 422


class NotFound(DomainError):
    status_code = 404


class Forbidden(DomainError):
    status_code = 403


class Unauthorized(DomainError):
    status_code = 401


class Conflict(DomainError):
    status_code = 409


class RateLimited(DomainError):
    status_code = 429

    def __init__(self, errors: dict[str, list[str]] | str, *, retry_after: int) -> None:
        super().__init__(errors)
        self.retry_after = retry_after

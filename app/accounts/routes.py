"""Login and logout: `GET/POST /login` (`email`, `password`, optional `next`), `POST /logout`."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from app.accounts import sessions
from app.kernel.actors import can_moderate
from app.kernel.errors import DomainError
from app.kernel.forms import LOGIN_FORM, field, safe_local_path
from app.kernel.intake import body_route, form_parser
from app.kernel.templating import templates


def _login_page(request: Request, context: dict[str, Any], status_code: int = 200) -> Response:
    base = {"values": {"email": "", "next": ""}, "errors": {}, "account": None}
    return templates.TemplateResponse(request, "accounts/login.html", {**base, **context}, status_code=status_code)


async def login_form(request: Request) -> Response:
    account = await sessions.current_account(request)
    next_path = safe_local_path(request.query_params.get("next"), default="")
    return _login_page(request, {"values": {"email": "", "next": next_path}, "account": account})


async def anonymous(request: Request) -> None:
    """The login form's caller: nobody yet (its own limits are per address and account, app.accounts.sessions)."""


async def login_submit(request: Request, _caller: None, form: FormData) -> Response:
    email, password = field(form, "email").strip(), field(form, "password")
    next_path = safe_local_path(field(form, "next"), default="")
    values = {"email": email, "next": next_path}
    errors: dict[str, list[str]] = {}
    if not email:
        errors["email"] = ["is required"]
    if not password:
        errors["password"] = ["is required"]
    if errors:
        return _login_page(request, {"values": values, "errors": errors}, status_code=422)
    try:
        result = await sessions.login(
            email,
            password,
            client_ip=request.client.host if request.client else None,
            presented_token=sessions.session_token(request),
        )
    except DomainError as exc:
        response = _login_page(request, {"values": values, "errors": exc.errors}, status_code=exc.status_code)
        response.headers.update(exc.headers())  # Retry-After of a 429 or of a shed 503
        return response
    default = "/moderation" if can_moderate(result.account) else "/"
    response = RedirectResponse(next_path or default, status_code=303)
    sessions.set_session_cookie(response, result.token)
    return response


async def logout(request: Request, _caller: None, _form: FormData) -> Response:
    await sessions.logout(sessions.session_token(request))
    response = RedirectResponse("/", status_code=303)
    sessions.clear_session_cookie(response)
    return response


routes: list[BaseRoute] = [
    Route("/login", login_form, methods=["GET"], name="login"),
    body_route("/login", login_submit, authenticate=anonymous, parse=form_parser(LOGIN_FORM)),
    body_route("/logout", logout, authenticate=anonymous, parse=form_parser(LOGIN_FORM)),
]

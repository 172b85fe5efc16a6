"""Who is looking at a public page: the session's account judged by the actor policy (`app.kernel.actors`)."""

from __future__ import annotations

from starlette.requests import Request

from app.accounts.sessions import current_account, session_token
from app.kernel.actors import ANONYMOUS, Viewer, viewer_of


async def viewer_for(request: Request) -> Viewer:
    """Anonymous unless a session cookie names a live session; privileged per `is_privileged_viewer`."""
    if session_token(request) is None:
        return ANONYMOUS  # public pages without a cookie never touch the sessions table
    return viewer_of(await current_account(request))

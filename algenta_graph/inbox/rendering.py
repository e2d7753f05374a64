"""How the operator inbox renders: its templates, its URLs, a page, a refusal.

Every page is a Jinja2 template of the wheel's ``templates/`` (autoescaped, undefined names an
error) rendered with the session's nav and form token; every link is built under
:data:`PREFIX` with its parts quoted; a post-sign-in target is kept only inside the inbox. This
module reads no form and asks no API (the handlers are :mod:`algenta_graph.inbox.signin`,
:mod:`~algenta_graph.inbox.answering` and :mod:`~algenta_graph.inbox.reading`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from algenta_graph.inbox.session import Session
from algenta_graph.serving.tokens import auth_configured, is_operator, operator_gates

__all__ = [
    "HERE",
    "PREFIX",
    "is_secure",
    "pretty",
    "refuse",
    "render",
    "safe_next",
    "templates",
    "url",
]

PREFIX = "/inbox"
"""Where the LangGraph server mounts the inbox."""
HERE = Path(__file__).resolve().parent
"""The inbox package's folder (``templates/``, ``static/``)."""

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(HERE / "templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
templates = Jinja2Templates(env=_env)
"""The inbox's templates (with the ``url`` global and the ``pretty`` filter)."""


def url(*parts: str, **query: str | None) -> str:
    """An inbox path: ``parts`` quoted under :data:`PREFIX`, the given ``query`` appended.

    >>> url("escalations", "t/1", "e"), url("decided", gate="budget", operator=None)
    ('/inbox/escalations/t%2F1/e', '/inbox/decided?gate=budget')
    """
    path = PREFIX + "".join("/" + quote(p, safe="") for p in parts)
    given = {k: v for k, v in query.items() if v}
    return path + ("?" + urlencode(given) if given else "")


_env.globals["url"] = url


def pretty(value: Any, indent: int | None = 2) -> str:
    """JSON text of ``value`` for a page (escaped by the template like any text)."""
    return json.dumps(value, indent=indent, sort_keys=True, default=str, ensure_ascii=False)


_env.filters["pretty"] = pretty


def render(
    request: Request,
    name: str,
    session: Session | None,
    status: int = 200,
    **context: Any,
) -> Response:
    """A page: ``name`` with the session's nav and form token."""
    roles = session.roles if session else ()
    base = {
        "session": session,
        "csrf": session.csrf if session else "",
        "can_answer": is_operator(roles),
        "gates": operator_gates(roles),
        "open_server": not auth_configured(),
        "error": None,
        "notice": None,
    }
    return templates.TemplateResponse(request, name, {**base, **context}, status_code=status)


def refuse(request: Request, session: Session | None, status: int, why: str) -> Response:
    """The error page: ``why``, answered with ``status``."""
    return render(request, "error.html", session, status, error=why, status_code=status)


def is_secure(request: Request) -> bool:
    """Whether the browser reached the inbox over HTTPS (a proxy's ``x-forwarded-proto`` too)."""
    proto = request.headers.get("x-forwarded-proto", request.url.scheme)
    return proto.split(",")[0].strip() == "https"


def safe_next(value: Any) -> str | None:
    """A post-sign-in target inside the inbox only (never another site).

    >>> safe_next("/inbox/queue"), safe_next("//evil.example/inbox"), safe_next("/threads")
    ('/inbox/queue', None, None)
    """
    text = str(value or "")
    if text.startswith(PREFIX + "/") and not text.startswith("//") and "\\" not in text:
        return text
    return None

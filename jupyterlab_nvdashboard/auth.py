"""Who may do what: the access rules every route of the server applies.

Three modes, chosen in ``config.py``:

* standalone (the default): every request must carry this launch's token, as
  ``?token=<t>``, as the cookie a valid ``?token=`` sets, or as an
  ``Authorization: token <t>`` header (Jupyter's form, handy for scripts). Run control on.
* ``--no-token``: anyone who can reach the port may watch; nobody may start or stop runs.
* ``--jupyter-proxy`` (on a private unix socket only): Jupyter has already authenticated
  every request it forwards, so no token is asked for here, and run control is on.

In every mode Bokeh sessions are signed with a secret made at each launch (``server.py``),
so a websocket is only accepted for a session id this server issued on an allowed page.

Our own tornado handlers subclass ``GuardedHandler`` (or call ``Access.require`` from
``prepare``); Bokeh's handlers ask ``BokehAuth``; Bokeh's static files are gated through
``bokeh_patches``.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from bokeh.server.auth_provider import AuthProvider
from tornado.web import HTTPError, RequestHandler

from .config import Config

TOKEN_ARGUMENT = "token"
COOKIE_PREFIX = "nvdashboard-token-"
AUTHORIZATION_SCHEMES = ("token", "bearer")
VIEW_ONLY_REASON = "view-only: started with --no-token"


@dataclass(frozen=True)
class Access:
    """The access rule of one server launch.

    ``token`` None means no token is asked for (``--no-token``, or behind Jupyter).
    ``run_control`` says whether the /Workload run panel may start and stop runs.
    ``cookie_name`` includes the port, so two servers on one host keep separate cookies.
    """

    token: str | None
    run_control: bool
    cookie_name: str = COOKIE_PREFIX + "default"

    @classmethod
    def for_config(cls, config: Config) -> Access:
        where = "unix" if config.unix_socket else str(config.port)
        return cls(config.token, config.run_control, COOKIE_PREFIX + where)

    def presented(self, handler: RequestHandler) -> list[str]:
        """The tokens a request offers besides ``?token=``: Authorization header, cookie."""
        offered = []
        scheme, _, value = handler.request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() in AUTHORIZATION_SCHEMES and value.strip():
            offered.append(value.strip())
        cookie = handler.get_cookie(self.cookie_name)
        if cookie:
            offered.append(cookie)
        return offered

    def matches(self, offered: str) -> bool:
        assert self.token is not None
        # Constant time, so response timing does not reveal how much of a guess was right.
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def allows(self, handler: RequestHandler) -> bool:
        """True when this request may be served; sets the cookie from a valid ``?token=``.

        A websocket handler calls this before it upgrades (from ``prepare``), and refuses
        with 403 when it answers False (``require`` does both).
        """
        if self.token is None:
            return True
        if any(self.matches(value) for value in handler.get_query_arguments(TOKEN_ARGUMENT)):
            self.remember(handler)
            return True
        return any(self.matches(value) for value in self.presented(handler))

    def remember(self, handler: RequestHandler) -> None:
        """Set the token cookie, so the page's own requests (BokehJS, websocket) carry it.

        HttpOnly keeps it from page scripts; SameSite=Strict keeps other sites' pages from
        sending it along with their requests.
        """
        assert self.token is not None
        handler.set_cookie(self.cookie_name, self.token, path="/", httponly=True,
                           samesite="Strict")

    def require(self, handler: RequestHandler) -> None:
        """Raise a 403 unless ``allows(handler)``."""
        if not self.allows(handler):
            raise HTTPError(403, reason="a valid token is required (see the server's log "
                            "for the URL with ?token=)")


class GuardedHandler(RequestHandler):
    """A tornado handler that answers 403 before anything else unless ``access`` allows.

    Subclasses receive ``access`` through the handler kwargs ``make_server`` passes to
    every extra route, alongside their own.
    """

    access: Access

    def initialize(self, access: Access, **kwargs: Any) -> None:
        self.access = access

    def prepare(self) -> None:
        self.access.require(self)


class BokehAuth(AuthProvider):
    """Bokeh's hook for its pages, websockets, metadata and autoload.js.

    The check runs in ``get_user_async``, which Bokeh awaits in ``prepare()``, before any
    handler method: a refused ``<route>/ws`` gets a 403 before the websocket upgrade (Bokeh's
    ``@authenticated`` on ``WSHandler.open`` would only run after it).
    """

    def __init__(self, access: Access) -> None:
        self.access = access
        super().__init__()

    @property
    def get_user_async(self) -> Any:
        if self.access.token is None:
            return None

        async def user(handler: RequestHandler) -> str:
            self.access.require(handler)
            return "token-holder"

        return user

    @property
    def get_login_url(self) -> Any:
        if self.access.token is None:
            return None

        def refuse(handler: RequestHandler) -> str:
            # There is no login page: a request without a valid token is simply refused.
            raise HTTPError(403)

        return refuse

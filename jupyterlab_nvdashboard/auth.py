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

Before the token, standalone (with or without a token) every request's ``Host`` must be a
well-formed host and optional port (``host_name``) whose host this server is known by
(``host_allowed``): a loopback name or address, the bind address, or a name given with
``--allow-host``. A web page on another site that re-binds its
own name to 127.0.0.1 (DNS rebinding) sends its own name as Host, and is refused. Every
websocket's ``Origin`` is then checked against the allow-list by this module itself, even
when it equals the Host (tornado accepts those without asking). Behind Jupyter, Jupyter has
already checked the Host against its own rules, which this server cannot know, so any Host
is answered; jupyter-server-proxy checks the browser's Origin and stamps its own on what it
forwards (``PROXY_ORIGIN_HOST`` in ``__init__.py``), and the allow-list holds exactly that.

No credential is ever placed in a page or a log: the Bokeh session token carries no cookie,
no header and only the ``theme`` argument (``server.py``), and library log lines have any
``token=`` value scrubbed (``scrub_secrets``), however the name is percent-encoded.

Our own tornado handlers subclass ``GuardedHandler`` (or call ``Access.require`` from
``prepare``); Bokeh's handlers ask ``BokehAuth``; Bokeh's static files are gated through
``bokeh_patches``.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from bokeh.server.auth_provider import AuthProvider
from bokeh.server.util import check_allowlist
from tornado.web import HTTPError, RequestHandler

from .config import Config

TOKEN_ARGUMENT = "token"
COOKIE_PREFIX = "nvdashboard-token-"
AUTHORIZATION_SCHEMES = ("token", "bearer")
VIEW_ONLY_REASON = "view-only: started with --no-token"
# Every page (HTML and JSON) is kept out of caches, and may only be framed by a page of its
# own origin: standalone that is this server; behind Jupyter the page is served through
# Jupyter's origin, so 'self' is Jupyter's origin, where JupyterLab frames it.
PAGE_HEADERS = {"Cache-Control": "no-store",
                "Content-Security-Policy": "frame-ancestors 'self'"}
# Names every machine gives its loopback interface (RFC 6761 reserves ``*.localhost``).
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                            "ip6-loopback"})
HOST_REFUSED = ("this server is not known by that name (Host header); start it with "
                "--allow-host NAME to allow one")
ORIGIN_REFUSED = "websocket Origin not allowed (see --allow-websocket-origin)"
# ``token=<value>`` in a logged URL (ours, or Jupyter's forwarded through the proxy) and
# Jupyter's ``_xsrf``: the value is replaced, as Jupyter scrubs its own request logs.
_SECRET_ARGUMENT = re.compile(r"(?i)\b(token|_xsrf)=")
# One query argument or path of a logged URL, or one word of a log line.
_URL_PART = re.compile(r"[^\s?&;\"']+")
# Tornado decodes an argument's name once (``?to%6ben=`` is ``token``, and authenticates);
# the scrubber decodes a part until it stops changing, so that no name tornado accepts, and
# no further encoding of one, carries a token into a log line. A few rounds are plenty.
_MOST_DECODINGS = 4


def _decoded(text: str) -> str:
    for _ in range(_MOST_DECODINGS):
        decoded = unquote_plus(text)
        if decoded == text:
            break
        text = decoded
    return text


def scrub_secrets(text: str) -> str:
    """``text`` with the value of every ``token=`` and ``_xsrf=`` replaced by ``[secret]``,
    however their names (or the ``=``) are percent-encoded."""

    def scrub(match: re.Match[str]) -> str:
        part = match.group(0)
        if not _SECRET_ARGUMENT.search(_decoded(part)):
            return part
        name, equals, _ = part.partition("=")
        if equals and _SECRET_ARGUMENT.search(_decoded(name) + "="):
            return f"{name}=[secret]"
        return "[secret]"  # the "=" itself was encoded: nothing of it can be kept

    return _URL_PART.sub(scrub, text)


# A Host header (RFC 9110, 7.2): an IPv6 address in brackets or a name (an IPv4 address
# among them), then optionally ":" and a port. Anything after either is refused: a lenient
# split took "[::1]evil.example" and "[::1]:8000junk" for ::1.
_HOST_HEADER = re.compile(r"(?:\[(?P<literal>[0-9a-f:.]+)\]"
                          r"|(?P<name>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?))"
                          r"(?::(?P<port>[0-9]{1,5}))?")
HIGHEST_PORT = 65535


def host_name(host: str) -> str | None:
    """The name or address in a ``Host`` header (port and IPv6 brackets removed, lowercased,
    no trailing dot), or None when it is not a well-formed host and optional port."""
    match = _HOST_HEADER.fullmatch(host.strip().lower())
    if match is None or int(match["port"] or 0) > HIGHEST_PORT:
        return None
    if match["literal"] is not None:
        literal = match["literal"]
        return literal if isinstance(_is_ip(literal), ipaddress.IPv6Address) else None
    return match["name"].rstrip(".")


def _is_ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


@dataclass(frozen=True)
class HostRule:
    """Which ``Host`` headers and websocket ``Origin`` headers this server answers.

    ``names``: host names (no port) besides the loopback ones; ``any_address``: bound to
    every interface, so any IP literal is this machine's (an IP literal cannot be
    re-bound by another site's DNS); ``origins``: ``HOST[:PORT]`` allow-list for
    websockets, in every mode. ``forwarded`` (behind Jupyter): Jupyter has checked the
    Host, so any is answered.
    """

    names: frozenset[str] = frozenset()
    any_address: bool = False
    origins: tuple[str, ...] = ()
    forwarded: bool = False

    @classmethod
    def for_config(cls, config: Config) -> HostRule:
        # An address as given to --address: "::1" bare, or in brackets.
        address = config.address.strip().lower().strip("[]").rstrip(".")
        names = {name.lower() for name in config.allow_hosts}
        if address not in ("0.0.0.0", "::", ""):
            names.add(address)
        return cls(frozenset(names), address in ("0.0.0.0", "::", ""),
                   tuple(origin.lower() for origin in config.websocket_origins),
                   config.jupyter_proxy)

    def host_allowed(self, host: str) -> bool:
        if self.forwarded:
            return True
        name = host_name(host)
        if name is None:
            return False
        address = _is_ip(name)
        if address is not None:
            return address.is_loopback or self.any_address or name in self.names
        return (name in LOOPBACK_NAMES or name.endswith(".localhost") or name in self.names)

    def origin_allowed(self, origin: str | None) -> bool:
        """A websocket's Origin: absent (not a browser: the token still applies) or allowed."""
        if origin is None:
            return True
        netloc = urlsplit(origin).netloc.lower()
        if not netloc:
            return False  # "null" (a sandboxed frame, a file: page) or garbage
        # Bokeh's own comparison, so both checks read the allow-list alike.
        return check_allowlist(netloc, self.origins)


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
    # Strict unless told otherwise (loopback names only, no websocket origin): make_server
    # builds it from the config.
    hosts: HostRule = HostRule()

    @classmethod
    def for_config(cls, config: Config) -> Access:
        where = "unix" if config.unix_socket else str(config.port)
        return cls(config.token, config.run_control, COOKIE_PREFIX + where,
                   HostRule.for_config(config))

    def refusal(self, handler: RequestHandler) -> str | None:
        """Why the Host or (for a websocket) the Origin of this request is refused, or None."""
        request = handler.request
        host = request.headers.get("Host", "")
        if not self.hosts.host_allowed(host):
            return HOST_REFUSED
        if request.headers.get("Upgrade", "").lower() == "websocket" and \
                not self.hosts.origin_allowed(request.headers.get("Origin")):
            return ORIGIN_REFUSED
        return None

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
        if self.refusal(handler) is not None:
            return False
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
        refusal = self.refusal(handler)
        if refusal is not None:
            raise HTTPError(403, reason=refusal)
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

    def set_default_headers(self) -> None:
        for name, value in PAGE_HEADERS.items():
            self.set_header(name, value)

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
        # Asked in every mode: Host and Origin are checked even where no token is.
        async def user(handler: RequestHandler) -> str:
            self.access.require(handler)
            return "token-holder" if self.access.token else "viewer"

        return user

    @property
    def get_login_url(self) -> Any:
        def refuse(handler: RequestHandler) -> str:
            # There is no login page: a request without a valid token is simply refused.
            raise HTTPError(403)

        return refuse

"""What the server refuses before it imports Bokeh: the settings, the simulated machine they
describe, and the address or unix socket it is to listen on.

Bokeh's import takes a second of CPU (several on a busy machine); a malformed setting, fault
spec or address needs none of it. ``server.py`` runs ``exit_on_bad_settings`` first thing
when started as a program, and ``main()`` runs ``check`` again for the settings it serves.
It also starts the watch of the Jupyter server this one is for (``jupyter_watch.py``), and
exits at once when that server is already gone. Standard library, ``config``,
``jupyter_watch`` and, in simulate mode, ``composition`` only.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .config import Config, ConfigError, load_config

if TYPE_CHECKING:
    from .simnvml import SimulatedNvml


# sun_path in <sys/un.h> is 108 bytes on Linux, the last for the terminating NUL.
MAX_UNIX_SOCKET_PATH = 107


def where(config: Config) -> str:
    """Where the server listens, as its messages name it."""
    return config.unix_socket or f"{config.address}:{config.port}"


def unix_socket_problem(path: str) -> str | None:
    """Why this server cannot listen on the unix socket ``path``, or None.

    Tornado would raise a ValueError (a traceback) for a directory or a file there, and it
    silently replaces a socket another server is still listening on; a stale socket left
    by a crash (nobody answers on it) is replaced, as before.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"there is no folder {folder}"
    if len(os.fsencode(path)) > MAX_UNIX_SOCKET_PATH:
        return f"a unix socket's path holds at most {MAX_UNIX_SOCKET_PATH} bytes"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        return error.strerror or str(error)
    if stat.S_ISDIR(info.st_mode):
        return "it is a directory; name a socket file inside it"
    if not stat.S_ISSOCK(info.st_mode):
        return "a file that is not a socket is in the way"
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return None  # stale: nobody listens on it any more
    except OSError as error:
        return error.strerror or str(error)
    else:
        return "another server is listening on it"
    finally:
        probe.close()
    return None


def address_problem(address: str, port: int) -> str | None:
    """Why ``address`` names no interface to listen on (the resolver's words), or None.

    The lookup Tornado makes before it binds; a port taken by another server is found only
    by binding, which ``server.main`` reports in the same words."""
    try:
        socket.getaddrinfo(address or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                           socket.AI_PASSIVE)
    except (OSError, UnicodeError) as error:
        return getattr(error, "strerror", None) or str(error)
    return None


def check(argv: Sequence[str] | None = None) -> tuple[Config, SimulatedNvml | None]:
    """The settings, and the simulated machine they describe (None unless simulating).

    Raises ConfigError (one line) for a malformed flag or variable, an unknown simulated
    profile, a malformed fault spec, or a place the server cannot listen on."""
    config = load_config(argv)
    simulator = None
    if config.simulation.enabled:
        from .composition import create_simulator  # the metrics layer: only when simulating

        simulator = create_simulator(config.simulation)
    problem = (unix_socket_problem(config.unix_socket) if config.unix_socket
               else address_problem(config.address, config.port))
    if problem:
        raise ConfigError(f"cannot listen on {where(config)}: {problem}")
    return config, simulator


def exit_on_bad_settings(argv: Sequence[str]) -> Config:
    """Exit with code 2 and one line on stderr when ``check`` refuses; the settings when not."""
    try:
        return check(argv)[0]
    except ConfigError as error:
        print(f"nvdashboard: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


#: The folder jupyter-server-proxy makes for a ``unix_socket: True`` server (``mkdtemp``)
#: and never removes: ours goes with the socket, so a stopped server leaves nothing.
PROXY_SOCKET_FOLDER_PREFIX = "jupyter-server-proxy-"


def remove_proxy_socket_folder(path: str) -> None:
    """Remove jupyter-server-proxy's folder around our socket, if it is now empty."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder).startswith(PROXY_SOCKET_FOLDER_PREFIX):
        try:
            os.rmdir(folder)  # only an empty folder: anything else in it stays
        except OSError:
            pass


def jupyter_gone(config: Config) -> str | None:
    """Why this server must not start (the one log line), when the Jupyter server it is for
    is already gone; None when it runs or none was named. Starts the watch of it
    (``jupyter_watch.py``). A server that does not start reads no GPU, takes no store lock,
    and leaves no proxy socket folder behind."""
    if config.jupyter_process is None:
        return None
    from .jupyter_watch import watch_jupyter

    watch = watch_jupyter(config.jupyter_process)
    if not watch.gone.is_set():
        return None
    if config.jupyter_proxy and config.unix_socket:
        remove_proxy_socket_folder(config.unix_socket)
    return watch.reason


def exit_if_jupyter_gone(config: Config) -> None:
    """Exit (code 0, one line) when the Jupyter server this one is for is already gone."""
    why_not = jupyter_gone(config)
    if why_not:
        print(f"nvdashboard: {why_not}", file=sys.stderr)
        raise SystemExit(0)

"""All nvdashboard settings in one typed object.

Settings come from command-line flags first, then ``NVDASHBOARD_*`` environment
variables, then defaults. Every validation problem is raised as a ``ConfigError``
whose message is one readable line, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .paths import (
    default_runs_dir,
    default_store_path,
    expand_path,
    simulated_processes_file,
)

MIN_INTERVAL_S = 0.05
DEFAULT_PORT = 8000
PROXY_IDLE_EXIT_S = 1800.0
MIN_TOKEN_LENGTH = 16


class ConfigError(Exception):
    """A setting is invalid; the message is one line meant for the user."""


def new_token() -> str:
    """A fresh random access token for one launch (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class SimulationConfig:
    """What the simulated NVML driver pretends to have (see simnvml/machine.py)."""

    gpu_count: int = 0
    nvlink: bool = True
    # Fault spec, e.g. "lose=1@5,init=DriverNotLoaded,unsupported=nvlink"
    faults: str = ""
    # Which machine to simulate (simnvml/profiles.py); checked when it is built.
    profile: str = "mixed"
    # A JSON file listing simulated GPU processes (simnvml/processes.py), re-read when it
    # changes: tests write it, and a notebook's kernel lists itself (simulated_holders.py).
    processes_file: str = ""
    # A simulated host's name: seeds its GPUs' UUIDs and is reported as their Hostname, so
    # processes that simulate one host agree and simulated hosts of a cluster differ.
    host: str = ""
    # Test-only: the nvidia-ml-py release to run over the simulated driver, as a wheel or a
    # pynvml.py file ('' is the installed one; metrics/binding.py).
    binding: str = ""
    # The load every simulated GPU plays (simnvml/scenarios.py), e.g. "launch-bound"; "" for
    # the profile's own. Checked here; the simulator plays it.
    scenario: str = ""

    @property
    def enabled(self) -> bool:
        return self.gpu_count > 0


@dataclass(frozen=True)
class JupyterProcess:
    """The Jupyter server a proxied dashboard server lives for: ``launch_server()`` names
    the process it runs in (``--jupyter-process PID:STARTED``), and the server exits once
    that process is gone (``jupyter_watch.py`` says why this identity cannot race)."""

    pid: int
    # When it started, as ``jupyter_watch.start_mark`` reads it: a later process given the
    # same PID has another.
    started: int

    def argument(self) -> str:
        """The value of ``--jupyter-process``; ``_jupyter_process`` reads it back."""
        return f"{self.pid}:{self.started}"


@dataclass(frozen=True)
class Config:
    address: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    unix_socket: str | None = None
    interval_s: float = 0.2
    # With no page open, the sampler slows to this (and keeps the history filling).
    idle_interval_s: float = 2.0
    # Exit after this long with no page open; 0 never. None: 30 minutes behind
    # jupyter-server-proxy (which restarts the server on the next open), never standalone.
    exit_after_idle_s: float | None = None
    history_s: float = 1800.0
    allow_websocket_origin: tuple[str, ...] = ()
    # Host names (no port) this server answers besides loopback names and its bind address
    # (auth.HostRule): the name a remote browser uses to reach it.
    allow_hosts: tuple[str, ...] = ()
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    # Directory the workload writes run event files to; the /Workload dashboard watches it.
    runs_dir: Path = field(default_factory=lambda: default_runs_dir({}))
    # Run event files kept in the runs directory; older ones are deleted (oldest first).
    keep_runs: int = 200
    # A page fetched without opening its websocket, or a closed tab, keeps its document (and
    # its periodic callback) until it has had no websocket for this long, and is discarded at
    # the next check. 15 s (Bokeh's own default) covers a slow first page load through a
    # proxy; a websocket that arrives later still gets a fresh document from its token.
    unused_session_lifetime_ms: int = 15_000
    # How often Bokeh looks for such sessions; a third of the lifetime, at most 5 s, so a
    # closed tab costs at most lifetime + check (20 s by default).
    check_unused_sessions_ms: int = 5_000
    # The token every request must carry (see auth.py); None asks for none: --no-token
    # (view only) or --jupyter-proxy (Jupyter authenticates). A new one at each launch.
    token: str | None = field(default_factory=new_token, repr=False)
    # Started by jupyter-server-proxy on a private unix socket (launch_server()).
    jupyter_proxy: bool = False
    # The Jupyter server whose end ends this server (launch_server() names it); None: none.
    jupyter_process: JupyterProcess | None = None
    # /metrics (Prometheus, DCGM names) is served only when asked for (export/).
    metrics_enabled: bool = False
    # Addresses (or networks) whose /metrics scrapes need no token, e.g. a Prometheus host.
    metrics_allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    # The host label of /metrics: dcgm-exporter's current "hostname", or the "Hostname" it
    # used before its change #655 (May 2026), for boards that still select on that.
    metrics_hostname_label: str = "hostname"
    # The DCGM names of /metrics (export/names.py): dcgm-exporter's up to 4.8 ("classic",
    # the default, so that existing boards and alerts keep working), DCGM 4.7's as
    # dcgm-exporter 4.9 and 4.10 serve them ("dcgm47"), or "both" while a fleet upgrades.
    metrics_names: str = "classic"
    # Per-user GPU usage series on /metrics (issue 28 item 5): off (0) by default, else at
    # most this many (user, kernel, GPU) series, so the label count stays bounded
    # (docs/prometheus.md: NVIDIA/dcgm-exporter#585).
    metrics_per_user: int = 0
    # Metrics-only environment variables that were set while /metrics is off: ignored, and
    # named in one warning line at start-up (server.py), never a reason not to start.
    ignored_variables: tuple[str, ...] = ()
    # A GPU that did no work this long is "unused" on the overview and in /glance.json
    # (issue 28 item 4: "no work for 30 minutes" is the default).
    unused_after_s: float = 1800.0
    # A Dask scheduler whose workers publish their GPUs (cluster/): /Cluster-GPUs.
    dask_scheduler: str | None = None
    # The history store (store/): one SQLite file that outlives the server. None: no store
    # (--no-store; and a Config built by hand, as tests do, unless they name one).
    store_path: Path | None = None
    # How long each tier of the store keeps its buckets (mean, min, max of each reading).
    store_retention_5s_s: float = 24 * 3600.0
    store_retention_1min_s: float = 30 * 24 * 3600.0

    @property
    def run_control(self) -> bool:
        """Whether /Workload may start and stop runs: only for a caller known to be allowed."""
        return self.token is not None or self.jupyter_proxy

    @property
    def websocket_origins(self) -> list[str]:
        """The explicit allow-list: what was configured, else this server's own host:port."""
        if self.allow_websocket_origin:
            return list(self.allow_websocket_origin)
        hosts = {self.address, "localhost", "127.0.0.1", *self.allow_hosts}
        if self.address in ("0.0.0.0", "::"):
            hosts = {"localhost", "127.0.0.1", *self.allow_hosts}
        return sorted(f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
                      for host in hosts)

    @property
    def idle_exit_s(self) -> float:
        """Seconds with no viewers before the server exits (0: never).

        With a store, a server behind jupyter-server-proxy no longer exits when idle: it
        keeps sampling at the idle interval, so the long windows have no hole for the time
        nobody watched (docs/history-store.md)."""
        if self.exit_after_idle_s is not None:
            return self.exit_after_idle_s
        return PROXY_IDLE_EXIT_S if self.jupyter_proxy and self.store_path is None else 0.0

    @property
    def history_length(self) -> int:
        """Number of samples the ring buffer keeps."""
        return max(1, int(round(self.history_s / self.interval_s)))


class _OneLineParser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def _positive_int(name: str, low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
        return value

    return parse


def _seconds(name: str, low: float, high: float, range_text: str, unit: str = "seconds"):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a number of {unit}, got {text!r}") from None
        if not low <= value <= high:  # also rejects NaN
            raise ConfigError(f"{name} must be between {range_text}, got {text}")
        return value

    return parse


_interval = _seconds("interval", MIN_INTERVAL_S, 60, f"{MIN_INTERVAL_S} and 60 seconds")
_history = _seconds("history", 1, 7 * 24 * 3600, "1 second and 7 days")
_idle_interval = _seconds("idle interval", MIN_INTERVAL_S, 60, f"{MIN_INTERVAL_S} and 60 seconds")
_exit_after_idle = _seconds("exit after idle", 0, 30 * 24 * 3600, "0 (never) and 30 days")
_unused_after = _seconds("unused after", 1, 30 * 24 * 3600, "1 second and 30 days")
_retention_5s = _seconds("store retention of 5-second buckets", 60, 7 * 24 * 3600,
                         "60 seconds and 7 days")
_retention_1min = _seconds("store retention of 1-minute buckets", 3600, 366 * 24 * 3600,
                           "1 hour and 366 days")


STORE_OFF = "off"


def _store(text: str) -> Path | str:
    """NVDASHBOARD_STORE: the store file, or off (``STORE_OFF``: no store)."""
    if text.strip().lower() in ("off", "0", "false", "no", "none"):
        return STORE_OFF
    path = expand_path(text.strip())
    if path.name in ("", ".", "..") or text.strip().endswith(os.sep):
        raise ConfigError(f"store must name a file (e.g. ~/nvdashboard/history.sqlite), "
                          f"got {text!r}")
    return path


def _boolean(name: str):
    def parse(text: str) -> bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} must be true or false, got {text!r}")

    return parse


# RFC 3986's unreserved characters: a token made of them travels unchanged in a URL, a
# cookie and an Authorization header. Spaces made every ?token= request a 500 (a cookie
# cannot hold them) and non-ASCII dropped the connection.
_TOKEN_CHARACTERS = re.compile(r"[A-Za-z0-9._~-]+")


def _token(text: str) -> str:
    if len(text) < MIN_TOKEN_LENGTH or not _TOKEN_CHARACTERS.fullmatch(text):
        raise ConfigError(f"the token must be at least {MIN_TOKEN_LENGTH} characters, each an "
                          "ASCII letter, digit, '-', '.', '_' or '~'")
    return text


# HOST or HOST:PORT, as Bokeh's allow-list compares them (no scheme, no path).
_ORIGIN = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?")


def _origin(text: str) -> str:
    origin = text.strip()
    if "*" in origin:
        # A wildcard lets any web page the user visits open these dashboards' websockets.
        raise ConfigError(f"websocket origin {text!r}: '*' is not allowed; name each HOST[:PORT]")
    if not _ORIGIN.fullmatch(origin):
        raise ConfigError(f"websocket origin must be HOST or HOST:PORT, got {text!r}")
    return origin


# A DNS name (RFC 1123 labels) or an IP address: what a browser sends as Host.
_ALLOWED_HOST = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                           r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def _allowed_host(text: str) -> str:
    name = text.strip().lower()
    if "*" in name:
        raise ConfigError(f"allowed host {text!r}: '*' is not allowed; name each host")
    try:
        return str(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        pass
    if not _ALLOWED_HOST.fullmatch(name):
        raise ConfigError(f"allowed host must be a host name or IP address without a port, "
                          f"got {text!r}")
    return name.rstrip(".")


def _allowed_hosts(text: str) -> list[str]:
    hosts = [_allowed_host(item) for item in text.split(",") if item.strip()]
    if not hosts:
        raise ConfigError(f"no host name in {text!r}; name each host, separated by commas")
    return hosts


def _origins(text: str) -> list[str]:
    origins = [_origin(item) for item in text.split(",") if item.strip()]
    if not origins:
        raise ConfigError(f"no origin in {text!r}; name each HOST[:PORT], separated by commas")
    return origins


def _runs_dir(text: str) -> Path:
    # Expanded exactly as the workload expands it (paths.py). A directory that cannot be
    # used is not an error here: the server starts and only the run panel is disabled.
    return expand_path(text)


def _binding_file(text: str) -> str:
    """Test-only: an nvidia-ml-py wheel or pynvml.py to run over the simulated driver."""
    path = Path(text).expanduser()
    if not path.is_file() or not path.name.endswith((".whl", ".py")):
        raise ConfigError(f"NVDASHBOARD_SIMULATE_BINDING must name an nvidia-ml-py wheel or a "
                          f"pynvml.py file, got {text!r}")
    return str(path)


def _processes_file(text: str) -> str:
    """The simulated process list; it may appear later, in a folder that exists."""
    path = expand_path(text)
    if not text.strip() or path.is_dir() or not path.parent.is_dir():
        raise ConfigError(f"NVDASHBOARD_SIMULATE_PROCESSES must name a file in an existing "
                          f"directory, got {text!r}")
    return str(path)
def _networks(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"metrics allow: {item!r} is not an IP address or network "
                              "(e.g. 10.0.0.5 or 10.0.0.0/24)") from None
    if not networks:
        raise ConfigError(f"metrics allow: no address in {text!r}")
    return networks


# What `dask worker` and Client() accept: [PROTOCOL://]HOST:PORT.
_SCHEDULER = re.compile(r"(?:(?:tcp|tls|ucx|ws|wss|inproc)://)?"
                        r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?")


_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _host_name(text: str) -> str:
    if not _HOST_NAME.fullmatch(text):
        raise ConfigError(f"simulated host name must be letters, digits, '.', '_' or '-' "
                          f"(at most 63), got {text!r}")
    return text


def _hostname_label(text: str) -> str:
    if text.strip() not in ("hostname", "Hostname"):
        raise ConfigError(f"metrics hostname label must be hostname (dcgm-exporter's current "
                          f"name) or Hostname (its name before May 2026), got {text!r}")
    return text.strip()


# The name contracts of /metrics; export/names.py says what each one exports.
METRICS_NAME_SETS = ("classic", "dcgm47", "both")


def _metrics_names(text: str) -> str:
    if text.strip() not in METRICS_NAME_SETS:
        raise ConfigError(f"metrics names must be classic (dcgm-exporter up to 4.8), dcgm47 "
                          f"(DCGM 4.7's, dcgm-exporter 4.9 and later) or both, got {text!r}")
    return text.strip()


def _scheduler(text: str) -> str:
    address = text.strip()
    if not _SCHEDULER.fullmatch(address):
        raise ConfigError(f"Dask scheduler address must look like tcp://HOST:8786, got {text!r}")
    return address


# Linux's largest PID (PID_MAX_LIMIT, 2**22); other systems stay below it too.
MAX_PID = 4_194_304


def _jupyter_process(text: str) -> JupyterProcess:
    pid, _, started = text.strip().partition(":")
    try:
        process = JupyterProcess(int(pid), int(started))
    except ValueError:
        process = None
    if process is None or not 1 <= process.pid <= MAX_PID or process.started < 0:
        raise ConfigError(f"--jupyter-process must be PID:STARTED, two whole numbers (as "
                          f"launch_server() writes it), got {text!r}")
    return process


_port = _positive_int("port", 1, 65535)
_keep_runs = _positive_int("keep-runs", 1, 1_000_000)
# A bound on the per-user series; 10,000 (x 5 series) is well within what one Prometheus
# target is expected to carry, and far above a single-user server's handful.
_metrics_per_user = _positive_int("metrics-per-user", 0, 10_000)
_simulate = _positive_int("simulate", 0, 64)
_milliseconds = _positive_int("milliseconds", 100, 3_600_000)

def _scenario(text: str) -> str:
    # Imported here, not at the top: metrics/ imports this module and must not pull in the
    # simulated driver's package.
    from .simnvml.scenarios import check_scenario

    try:
        return check_scenario(text.strip())
    except ValueError as error:
        raise ConfigError(str(error)) from None


# flag -> (environment variable, parser); one table so flags and env vars cannot drift.
_ENVIRONMENT = {
    "address": ("NVDASHBOARD_ADDRESS", str),
    "port": ("NVDASHBOARD_PORT", _port),
    "unix_socket": ("NVDASHBOARD_UNIX_SOCKET", str),
    "interval": ("NVDASHBOARD_INTERVAL", _interval),
    "history": ("NVDASHBOARD_HISTORY", _history),
    "idle_interval": ("NVDASHBOARD_IDLE_INTERVAL", _idle_interval),
    "exit_after_idle": ("NVDASHBOARD_EXIT_AFTER_IDLE", _exit_after_idle),
    "allow_websocket_origin": ("NVDASHBOARD_ALLOW_WEBSOCKET_ORIGIN", _origins),
    "allow_host": ("NVDASHBOARD_ALLOW_HOST", _allowed_hosts),
    "simulate": ("NVDASHBOARD_SIMULATE", _simulate),
    "simulate_nvlink": ("NVDASHBOARD_SIMULATE_NVLINK", _boolean("NVDASHBOARD_SIMULATE_NVLINK")),
    "simulate_faults": ("NVDASHBOARD_SIMULATE_FAULTS", str),
    "simulate_profile": ("NVDASHBOARD_SIMULATE_PROFILE", str),
    "simulate_processes": ("NVDASHBOARD_SIMULATE_PROCESSES", _processes_file),
    "simulate_host": ("NVDASHBOARD_SIMULATE_HOST", _host_name),
    "simulate_binding": ("NVDASHBOARD_SIMULATE_BINDING", _binding_file),
    "simulate_scenario": ("NVDASHBOARD_SIMULATE_SCENARIO", _scenario),
    "metrics": ("NVDASHBOARD_METRICS", _boolean("NVDASHBOARD_METRICS")),
    "metrics_allow": ("NVDASHBOARD_METRICS_ALLOW", _networks),
    "metrics_hostname_label": ("NVDASHBOARD_METRICS_HOSTNAME_LABEL", _hostname_label),
    "metrics_per_user": ("NVDASHBOARD_METRICS_PER_USER", _metrics_per_user),
    "metrics_names": ("NVDASHBOARD_METRICS_NAMES", _metrics_names),
    "unused_after": ("NVDASHBOARD_UNUSED_AFTER", _unused_after),
    # Dask's own variable (dask-labextension and dask-jobqueue set it): cluster mode.
    "dask_scheduler": ("DASK_SCHEDULER_ADDRESS", _scheduler),
    "runs_dir": ("NVDASHBOARD_RUNS_DIR", _runs_dir),
    "keep_runs": ("NVDASHBOARD_KEEP_RUNS", _keep_runs),
    "unused_session_lifetime": ("NVDASHBOARD_UNUSED_SESSION_LIFETIME_MS", _milliseconds),
    "store": ("NVDASHBOARD_STORE", _store),
    "store_retention_5s": ("NVDASHBOARD_STORE_RETENTION_5S", _retention_5s),
    "store_retention_1min": ("NVDASHBOARD_STORE_RETENTION_1MIN", _retention_1min),
    # No --token flag on purpose: a command line is visible to every user in `ps`.
    "token": ("NVDASHBOARD_TOKEN", _token),
}
# Settings that only shape /metrics. A hub image may set them in the environment of every
# user's server, with /metrics on for some only: where /metrics is off they are ignored with
# one warning line (their values unread, so a bad one cannot stop the dashboards). On the
# command line an operator asked for them: there they still need --metrics.
METRICS_ONLY_SETTINGS = ("metrics_hostname_label", "metrics_names")
# Bokeh's own variable replaces our allow-list wholesale; a '*' there would open the
# websockets to every web page, so it gets the same check.
BOKEH_ORIGIN_VARIABLE = "BOKEH_ALLOW_WS_ORIGIN"


def build_parser() -> argparse.ArgumentParser:
    from . import __version__  # the installed distribution's, as /info.json reports it
    from .simnvml.scenarios import scenario_names

    parser = _OneLineParser(
        prog="python -m jupyterlab_nvdashboard.server",
        description="Serve live GPU and machine dashboards with Bokeh.",
    )
    parser.add_argument("--version", action="version",
                        version=f"jupyterlab-nvdashboard {__version__}",
                        help="print this package's version and exit")
    parser.add_argument("port_positional", nargs="?", type=_port, metavar="PORT",
                        help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--port", type=_port, help="port to listen on (same as PORT)")
    parser.add_argument("--address", help="address to bind (default 127.0.0.1; 0.0.0.0 exposes "
                        "the dashboards to the whole network)")
    parser.add_argument("--unix-socket", help="listen on this unix socket instead of a TCP port")
    parser.add_argument("--interval", type=_interval,
                        help=f"seconds between samples (default 0.2, minimum {MIN_INTERVAL_S})")
    parser.add_argument("--history", type=_history,
                        help="seconds of history to keep (default 1800)")
    parser.add_argument("--idle-interval", type=_idle_interval,
                        help="seconds between samples while no page is open (default 2)")
    parser.add_argument("--exit-after-idle", type=_exit_after_idle, metavar="SECONDS",
                        help="exit after this long with no page open; 0 never (default: "
                        "never; 1800 behind jupyter-server-proxy with --no-store)")
    parser.add_argument("--allow-websocket-origin", action="append", metavar="HOST[:PORT]",
                        type=_origin,
                        help="allow browser pages from this origin (repeatable; default: this "
                        "server's own host and port)")
    parser.add_argument("--allow-host", action="append", type=_allowed_hosts, metavar="NAME",
                        help="answer requests that name this server NAME (the Host header), "
                        "besides localhost and the bind address (repeatable, or "
                        "comma-separated)")
    parser.add_argument("--simulate", type=_simulate, metavar="N",
                        help="simulate N GPUs instead of reading NVML (always labelled SIMULATED)")
    parser.add_argument("--simulate-no-nvlink", dest="simulate_nvlink", action="store_const",
                        const=False, help="simulated GPUs have no NVLink")
    parser.add_argument("--simulate-profile", metavar="NAME",
                        help="which machine to simulate: mixed (default), h200, a100-535, "
                        "a100-mig, h100-mig, consumer, vgpu, wrap32 or link-gap; implies "
                        "--simulate 2 unless --simulate is given")
    parser.add_argument("--simulate-scenario", metavar="NAME", type=_scenario,
                        help="the load every simulated GPU plays: " +
                        ", ".join(scenario_names()) + "; implies --simulate 2 unless "
                        "--simulate is given")
    parser.add_argument("--metrics", action="store_const", const=True,
                        help="serve /metrics for Prometheus, with the DCGM exporter's metric "
                        "names (off by default; same token rules as every route)")
    parser.add_argument("--metrics-allow", action="append", type=_networks,
                        metavar="ADDRESS[/BITS]",
                        help="let scrapes of /metrics from this address or network in "
                        "without the token (repeatable, or comma-separated)")
    parser.add_argument("--metrics-hostname-label", type=_hostname_label,
                        metavar="hostname|Hostname",
                        help="the host label of /metrics: hostname (dcgm-exporter's current "
                        "name, the default) or Hostname (its name before May 2026)")
    parser.add_argument("--metrics-names", type=_metrics_names,
                        metavar="classic|dcgm47|both",
                        help="the DCGM metric names of /metrics: classic (dcgm-exporter up to "
                        "4.8, the default), dcgm47 (DCGM 4.7's names and units, as "
                        "dcgm-exporter 4.9 and 4.10 serve them) or both")
    parser.add_argument("--metrics-per-user", type=_metrics_per_user, metavar="N",
                        help="also export GPU memory held and idle time per user and Jupyter "
                        "kernel, at most N (user, kernel, GPU) series (off: 0, the default)")
    parser.add_argument("--unused-after", type=_unused_after, metavar="SECONDS",
                        help="call a GPU unused on the overview and in /glance.json after "
                        "it did no work this long (default 1800)")
    parser.add_argument("--dask-scheduler", type=_scheduler, metavar="tcp://HOST:PORT",
                        help="show the GPUs of this Dask cluster's workers on /Cluster-GPUs "
                        "(default: $DASK_SCHEDULER_ADDRESS)")
    parser.add_argument("--runs-dir", type=_runs_dir,
                        help="directory of workload run event files")
    parser.add_argument("--keep-runs", type=_keep_runs, metavar="N",
                        help="run event files kept in the runs directory; older ones are "
                        "deleted (default 200)")
    parser.add_argument("--store", type=_store, metavar="FILE",
                        help="the history store, which keeps 5-second and 1-minute buckets "
                        "across restarts (default: $XDG_STATE_HOME/nvdashboard/"
                        "history.sqlite, else Jupyter's data folder; off: none)")
    parser.add_argument("--no-store", action="store_true",
                        help="keep no history on disk: the in-memory --history only")
    parser.add_argument("--store-retention-5s", type=_retention_5s, metavar="SECONDS",
                        help="how long the store keeps 5-second buckets (default 86400)")
    parser.add_argument("--store-retention-1min", type=_retention_1min, metavar="SECONDS",
                        help="how long the store keeps 1-minute buckets (default 2592000, "
                        "30 days)")
    parser.add_argument("--no-token", action="store_true",
                        help="ask for no access token: anyone who can reach the port may watch "
                        "the dashboards, and the /Workload run panel is disabled (view only)")
    parser.add_argument("--jupyter-proxy", action="store_true",
                        help="internal: set by jupyter-server-proxy, which authenticates every "
                        "request; needs --unix-socket")
    parser.add_argument("--jupyter-process", type=_jupyter_process, metavar="PID:STARTED",
                        help="internal: set by jupyter-server-proxy: the Jupyter server's PID "
                        "and start time; this server exits once that process is gone")
    return parser


def _from_environment(environ: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for key, (variable, parse) in _ENVIRONMENT.items():
        text = environ.get(variable)
        if text is None or text == "":
            continue
        try:
            values[key] = parse(text)
        except ConfigError as error:
            raise ConfigError(f"{variable}: {error}") from None
    bokeh_origins = environ.get(BOKEH_ORIGIN_VARIABLE)
    if bokeh_origins:
        try:
            origins = _origins(bokeh_origins)
        except ConfigError as error:
            raise ConfigError(f"{BOKEH_ORIGIN_VARIABLE}: {error}") from None
        # Bokeh's variable replaces the allow-list wholesale (as Bokeh itself does), and the
        # project's own check (auth.HostRule) must see the same list.
        values.setdefault("allow_websocket_origin", origins)
    return values


def _ignored_metrics_variables(environ: Mapping[str, str], metrics_flag: bool
                               ) -> tuple[str, ...]:
    """The metrics-only variables set in ``environ`` while /metrics is off (neither
    ``--metrics`` nor NVDASHBOARD_METRICS turns it on)."""
    variable, parse = _ENVIRONMENT["metrics"]
    try:
        metrics_on = metrics_flag or bool(environ.get(variable) and parse(environ[variable]))
    except ConfigError:
        return ()  # a bad NVDASHBOARD_METRICS: _from_environment says so, in one line
    if metrics_on:
        return ()
    names = (_ENVIRONMENT[key][0] for key in METRICS_ONLY_SETTINGS)
    return tuple(name for name in names if environ.get(name))


def ignored_variables_warning(config: Config) -> str | None:
    """The one warning line for ``config.ignored_variables``, or None."""
    if not config.ignored_variables:
        return None
    return (f"{', '.join(config.ignored_variables)} ignored: /metrics is off "
            "(--metrics or NVDASHBOARD_METRICS=1 turns it on)")


def load_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Build the Config from flags (highest priority), environment, then defaults."""
    environ = os.environ if environ is None else environ
    args = vars(build_parser().parse_args([] if argv is None else list(argv)))
    positional_port = args.pop("port_positional")
    no_token, jupyter_proxy = args.pop("no_token"), args.pop("jupyter_proxy")
    no_store = args.pop("no_store")
    if args["port"] is None:
        args["port"] = positional_port
    elif positional_port is not None and positional_port != args["port"]:
        raise ConfigError(f"PORT {positional_port} and --port {args['port']} disagree")
    ignored = _ignored_metrics_variables(environ, bool(args.get("metrics")))
    merged = _from_environment({name: text for name, text in environ.items()
                                if name not in ignored})
    merged.update({key: value for key, value in args.items() if value is not None})

    defaults = Config()
    interval_s = float(merged.get("interval", defaults.interval_s))  # type: ignore[arg-type]
    lifetime_ms = int(merged.get("unused_session_lifetime",  # type: ignore[arg-type]
                                 defaults.unused_session_lifetime_ms))
    unix_socket = merged.get("unix_socket")
    if jupyter_proxy and not unix_socket:
        # Run control with no token is only safe where Jupyter authenticates every request.
        raise ConfigError("--jupyter-proxy needs --unix-socket: on a TCP port nothing would "
                          "authenticate requests")
    if jupyter_proxy and no_token:
        raise ConfigError("--jupyter-proxy and --no-token cannot be combined")
    token = None if no_token or jupyter_proxy else str(merged.get("token") or new_token())
    profile = merged.get("simulate_profile")
    scenario = str(merged.get("simulate_scenario", ""))
    gpu_count = int(merged.get("simulate", 2 if profile or scenario else 0))  # type: ignore[arg-type]
    if merged.get("simulate_processes") and not gpu_count:
        raise ConfigError("NVDASHBOARD_SIMULATE_PROCESSES: simulated processes need simulated "
                          "GPUs (--simulate N or NVDASHBOARD_SIMULATE)")
    if merged.get("simulate_faults") and not gpu_count:
        raise ConfigError("NVDASHBOARD_SIMULATE_FAULTS: faults need simulated GPUs "
                          "(--simulate N or NVDASHBOARD_SIMULATE)")
    simulation = SimulationConfig(
        gpu_count=gpu_count,
        nvlink=bool(merged.get("simulate_nvlink", True)),
        faults=str(merged.get("simulate_faults", "")),
        profile=str(profile or SimulationConfig.profile),
        # Where a notebook's kernel lists itself as a GPU holder (simulated_holders.py):
        # the named file, else the default one, whenever the GPUs are simulated.
        processes_file=str(merged.get("simulate_processes", "")
                           or (simulated_processes_file(environ) if gpu_count else "")),
        host=str(merged.get("simulate_host", "")),
        binding=str(merged.get("simulate_binding", "")),
        scenario=scenario,
    )
    allow_hosts = merged.get("allow_host", ())
    if allow_hosts and isinstance(allow_hosts[0], list):  # the repeatable flag: lists
        allow_hosts = [name for names in allow_hosts for name in names]  # type: ignore[union-attr]
    allow = merged.get("metrics_allow", ())
    if allow and isinstance(allow[0], list):  # the flag is repeatable: a list of lists
        allow = [network for networks in allow for network in networks]  # type: ignore[union-attr]
    if allow and not merged.get("metrics"):
        raise ConfigError("--metrics-allow needs --metrics (NVDASHBOARD_METRICS=1)")
    if merged.get("metrics_per_user") and not merged.get("metrics"):
        raise ConfigError("--metrics-per-user needs --metrics (NVDASHBOARD_METRICS=1)")
    if merged.get("metrics_names") and not merged.get("metrics"):
        raise ConfigError("--metrics-names needs --metrics (NVDASHBOARD_METRICS=1)")
    store = merged.get("store", default_store_path(environ))
    store_path = None if no_store or store == STORE_OFF else store
    retention_5s = float(merged.get("store_retention_5s",  # type: ignore[arg-type]
                                    defaults.store_retention_5s_s))
    retention_1min = float(merged.get("store_retention_1min",  # type: ignore[arg-type]
                                      defaults.store_retention_1min_s))
    if retention_1min < retention_5s:
        raise ConfigError("store retention of 1-minute buckets must be at least that of "
                          "5-second buckets")
    return Config(
        address=str(merged.get("address", defaults.address)),
        port=int(merged.get("port", defaults.port)),  # type: ignore[arg-type]
        unix_socket=unix_socket,  # type: ignore[arg-type]
        interval_s=interval_s,
        idle_interval_s=max(interval_s, float(merged.get(  # type: ignore[arg-type]
            "idle_interval", defaults.idle_interval_s))),
        exit_after_idle_s=(None if merged.get("exit_after_idle") is None
                           else float(merged["exit_after_idle"])),  # type: ignore[arg-type]
        history_s=float(merged.get("history", defaults.history_s)),  # type: ignore[arg-type]
        allow_websocket_origin=tuple(merged.get("allow_websocket_origin", ())),  # type: ignore[arg-type]
        allow_hosts=tuple(dict.fromkeys(allow_hosts)),  # type: ignore[arg-type]
        simulation=simulation,
        runs_dir=Path(merged.get("runs_dir", defaults.runs_dir)),  # type: ignore[arg-type]
        keep_runs=int(merged.get("keep_runs", defaults.keep_runs)),  # type: ignore[arg-type]
        unused_session_lifetime_ms=lifetime_ms,
        check_unused_sessions_ms=check_interval_ms(lifetime_ms),
        token=token,
        jupyter_proxy=jupyter_proxy,
        jupyter_process=merged.get("jupyter_process"),  # type: ignore[arg-type]
        metrics_enabled=bool(merged.get("metrics", False)),
        metrics_allow=tuple(allow),  # type: ignore[arg-type]
        metrics_hostname_label=str(merged.get("metrics_hostname_label", "hostname")),
        metrics_per_user=int(merged.get("metrics_per_user", 0)),  # type: ignore[arg-type]
        metrics_names=str(merged.get("metrics_names", defaults.metrics_names)),
        ignored_variables=ignored,
        unused_after_s=float(merged.get("unused_after",  # type: ignore[arg-type]
                                        defaults.unused_after_s)),
        dask_scheduler=merged.get("dask_scheduler"),  # type: ignore[arg-type]
        store_path=store_path,  # type: ignore[arg-type]
        store_retention_5s_s=retention_5s,
        store_retention_1min_s=retention_1min,
    )


START_WITH_JUPYTER_VARIABLE = "NVDASHBOARD_START_WITH_JUPYTER"


def start_with_jupyter(environ: Mapping[str, str]) -> bool:
    """Whether the Jupyter server extension starts the dashboard server with Jupyter
    (``NVDASHBOARD_START_WITH_JUPYTER``, on by default); ConfigError for a bad value."""
    text = environ.get(START_WITH_JUPYTER_VARIABLE, "")
    return True if not text.strip() else _boolean(START_WITH_JUPYTER_VARIABLE)(text)


# The GPU-aware cull of idle kernels (the Jupyter server extension, idle_cull.py).
CULL_AFTER_VARIABLE = "NVDASHBOARD_CULL_AFTER_MINUTES"
CULL_IDLE_VARIABLE = "NVDASHBOARD_CULL_IDLE_MINUTES"
CULL_MIN_GIB_VARIABLE = "NVDASHBOARD_CULL_MIN_GIB"
# The defaults for an idle holder: at least 1 GiB held, no GPU work for 30 minutes.
CULL_IDLE_MINUTES_DEFAULT = 30.0
CULL_MIN_GIB_DEFAULT = 1.0
_MINUTES_MAX = 30 * 24 * 60


@dataclass(frozen=True)
class CullSettings:
    """The admin's cull: off (``after_minutes`` None) unless NVDASHBOARD_CULL_AFTER_MINUTES
    says how long after the user was told an idle holder is shut down."""

    after_minutes: float | None = None
    idle_minutes: float = CULL_IDLE_MINUTES_DEFAULT
    min_gib: float = CULL_MIN_GIB_DEFAULT


def cull_settings(environ: Mapping[str, str]) -> CullSettings:
    """The cull's settings from ``NVDASHBOARD_CULL_*``; ConfigError (one line) for a bad one.
    Unset, empty or 0 minutes after the notice: the cull is off."""
    def read(name: str, unit: str, high: float, default: float | None) -> float | None:
        text = environ.get(name, "").strip()
        return default if not text else \
            _seconds(name, 0, high, f"0 and {high:g} {unit}", unit)(text)

    after = read(CULL_AFTER_VARIABLE, "minutes", _MINUTES_MAX, None)
    return CullSettings(
        after_minutes=after or None,
        idle_minutes=read(CULL_IDLE_VARIABLE, "minutes", _MINUTES_MAX,  # type: ignore[arg-type]
                          CULL_IDLE_MINUTES_DEFAULT),
        min_gib=read(CULL_MIN_GIB_VARIABLE, "GiB", 1e6,  # type: ignore[arg-type]
                     CULL_MIN_GIB_DEFAULT))


def check_interval_ms(unused_session_lifetime_ms: int) -> int:
    """How often to discard unused sessions: a third of their lifetime, 100 ms to 5 s."""
    return max(100, min(5_000, unused_session_lifetime_ms // 3))

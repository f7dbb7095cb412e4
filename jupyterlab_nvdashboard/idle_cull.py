"""The GPU-aware cull of idle kernels, for admins: off by default.

A kernel that holds GPU memory and does no GPU work (the judgment ``idle`` on each kernel of
``/glance.json``) is first told to its user by JupyterLab's notice; the frontend then posts
``<base_url>nvdashboard-idle/notices`` {kernel_id, episode}, and posts it again at each read of
the culls while the warning is on screen. With
``NVDASHBOARD_CULL_AFTER_MINUTES=M`` set (Zero to JupyterHub: ``singleuser.extraEnv``), this
server extension shuts that kernel down through Jupyter's own kernel manager M minutes after
the notice, and only when, at that moment, all of these hold (``why_kept`` says which did not):

- the notice was for the same idle episode (a cell run or GPU work since starts a new one);
- its warning has been on screen for the whole grace time: a JupyterLab said so at least
  every ``seen_gap_s``; after a longer silence the grace starts again when it is next seen;
- Jupyter itself saw no cell run by the kernel since the user was told (the execution
  clock of ``kernel_executions.py``, else the kernel manager's ``last_activity``): the
  judgment served by the dashboard is a copy, and may be older;
- the judgment is ``idle`` (never ``busy``, never ``cannot_tell``);
- it has done no GPU work for ``NVDASHBOARD_CULL_IDLE_MINUTES`` (default 30) and holds at
  least ``NVDASHBOARD_CULL_MIN_GIB`` (default 1 GiB): the user's own, lower notice
  thresholds never make the cull come sooner;
- Jupyter's own execution state of the kernel is ``idle``.

One rule decides when a warning's idle episode is over (``episode_over``): the kernel is
gone, works again, starts another idle episode, or the user kept it ("Keep this kernel":
``POST <base_url>nvdashboard-idle/keeps`` holds the cull off for ``keep_s``). A reading that
misses the kernel, or cannot tell, ends nothing: the warning stays armed, and the cull waits.
JupyterLab shows a warning exactly while it is listed in ``warnings`` of
``GET <base_url>nvdashboard-idle/culls``, so the warning on screen and the cull never
disagree.

Each cull is logged at WARNING with its evidence (the judgment as served), and is listed at
``GET <base_url>nvdashboard-idle/culls``, from which JupyterLab tells the user what was done
and why. Nothing is read while no notice waits: the cull costs nothing until it may act.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .config import CullSettings
from .diagnosis.idle import BUSY, BUSY_STATES, IDLE

GIB = 2**30
NOTICES_PATH = "nvdashboard-idle/notices"
CULLS_PATH = "nvdashboard-idle/culls"
KEEPS_PATH = "nvdashboard-idle/keeps"
EXECUTIONS_PATH = "nvdashboard-idle/executions"
# Bounds on what a client can make this server remember.
MAX_NOTICES = 1000
MAX_CULLS = 100
MAX_ID_CHARS = 200


@dataclass(frozen=True)
class CullPolicy:
    """The cull's thresholds in seconds and bytes; ``after_notice_s`` None: off."""

    after_notice_s: float | None
    idle_s: float
    min_held_bytes: float

    @classmethod
    def from_settings(cls, settings: CullSettings) -> CullPolicy:
        after = settings.after_minutes
        return cls(None if not after else after * 60.0, settings.idle_minutes * 60.0,
                   settings.min_gib * GIB)

    @property
    def on(self) -> bool:
        return self.after_notice_s is not None

    @property
    def check_interval_s(self) -> float:
        """How often a waiting notice is checked, and how often JupyterLab says its warning
        is on screen: a sixth of the grace, 1 s to 60 s."""
        return max(1.0, min(60.0, (self.after_notice_s or 60.0) / 6))

    @property
    def seen_gap_s(self) -> float:
        """The longest silence from JupyterLab that still counts as "on screen": three of
        its reports (one lost to a slow request is no gap) and a little slack."""
        return 3 * self.check_interval_s + 2.0

    @property
    def keep_s(self) -> float:
        """How long "Keep this kernel" holds the cull off: the admin's idle time, and never
        less than one grace."""
        return max(self.idle_s, self.after_notice_s or 0.0)

    def as_json(self) -> dict[str, Any]:
        return {"on": self.on,
                "after_notice_minutes": None if self.after_notice_s is None
                else self.after_notice_s / 60,
                "idle_minutes": self.idle_s / 60, "min_held_bytes": self.min_held_bytes,
                "report_every_s": self.check_interval_s, "keep_minutes": self.keep_s / 60}


@dataclass(frozen=True)
class Notice:
    """The warning for this kernel's idle episode has been on screen since ``shown_at``
    (time.time()), the last JupyterLab report of it being at ``seen_at``."""

    kernel_id: str
    episode: str
    shown_at: float
    seen_at: float

    def cull_at(self, policy: CullPolicy) -> float:
        return self.shown_at + (policy.after_notice_s or 0.0)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def episode_over(notice: Notice, idle: Mapping[str, Any] | None, execution_state: str | None,
                 last_cell_s: float | None) -> str | None:
    """Why the idle episode the user was warned of is over, in words; None while it goes on.

    The one rule for a warning's life: JupyterLab shows it while the server keeps it. A
    reading without the kernel, or one that cannot tell, ends nothing (``why_kept`` still
    keeps the kernel meanwhile). ``last_cell_s``: Jupyter's own (``IdleCuller.last_cell``).
    """
    if execution_state is None:
        return "the kernel is gone"
    if execution_state in BUSY_STATES:
        return f"Jupyter says the kernel is {execution_state!r}"
    if last_cell_s is not None and last_cell_s > notice.shown_at:
        return "the kernel ran a cell since the user was told"
    if isinstance(idle, Mapping):
        if idle.get("state") == BUSY:
            return "it works again"
        if idle.get("state") == IDLE and idle.get("episode") != notice.episode:
            return "it worked since the user was told (another idle episode)"
    return None


def why_kept(policy: CullPolicy, notice: Notice | None, idle: Mapping[str, Any] | None,
             execution_state: str | None, last_cell_s: float | None, now: float
             ) -> str | None:
    """None when the kernel is to be shut down now; else why it is kept, in words.

    ``idle``: the kernel's ``idle`` object from ``/glance.json`` (None: the kernel holds no
    GPU memory now); ``execution_state`` and ``last_cell_s``: Jupyter's kernel
    manager's own (None: not a kernel of this server; not said).
    """
    if not policy.on:
        return "the cull is off"
    if notice is None:
        return "the user was not told"
    if execution_state is None:
        return "not a kernel of this Jupyter server"
    unseen_s = now - notice.seen_at
    if unseen_s > policy.seen_gap_s:
        return f"its warning was not reported on screen for {unseen_s:.0f} s"
    if last_cell_s is None:
        return "Jupyter does not say when the kernel last ran a cell"
    over = episode_over(notice, idle, execution_state, last_cell_s)
    if over is not None:
        return over
    if not isinstance(idle, Mapping):
        return "it holds no GPU memory now"
    state = idle.get("state")
    if state != "idle":
        return f"the judgment is {state!r}, not 'idle'"
    told_s = now - notice.shown_at
    if told_s < (policy.after_notice_s or 0.0):
        return f"told {told_s:.0f} s ago, the cull waits {policy.after_notice_s:.0f} s"
    # The served idle time is a copy; Jupyter's own record of the kernel bounds it.
    served_s = _number(idle.get("idle_s"))
    idle_s = None if served_s is None else min(served_s, now - last_cell_s)
    if idle_s is None or idle_s < policy.idle_s:
        return f"no GPU work for {idle_s or 0:.0f} s, the cull needs {policy.idle_s:.0f} s"
    held = _number(idle.get("held_bytes"))
    if held is None or held < policy.min_held_bytes:
        return f"holds {held or 0:.0f} bytes, the cull needs {policy.min_held_bytes:.0f}"
    if execution_state != "idle":
        return f"Jupyter says the kernel is {execution_state!r}"
    return None


class IdleCuller:
    """The notices shown and the culls done in this Jupyter server; ``check()`` acts.

    ``kernel_manager``: Jupyter's (``serverapp.kernel_manager``); ``read_glance``: resolves
    with ``/glance.json``'s body (through jupyter-server-proxy, as the user would read it).
    """

    def __init__(self, policy: CullPolicy, kernel_manager: Any,
                 read_glance: Callable[[], Awaitable[Any]], log: logging.Logger,
                 clock: Callable[[], float] = time.time,
                 last_execution: Callable[[str], float | None] = lambda kernel_id: None
                 ) -> None:
        self.policy = policy
        self._kernels = kernel_manager
        self._read_glance = read_glance
        self._log = log
        self._clock = clock
        self._last_execution = last_execution
        self.notices: dict[str, Notice] = {}
        self.kept: dict[str, float] = {}  # kernel id -> "Keep this kernel" until (epoch s)
        # kernel id -> why its armed warning has not led to a cull, as of the last check:
        # an admin (or a test) reading the culls sees what the cull still waits for.
        self.waiting: dict[str, str] = {}
        self.culls: deque[dict[str, Any]] = deque(maxlen=MAX_CULLS)
        self._culls_made = 0
        self.checks = 0  # passes made: a client can wait for "the next pass" by counting
        self._glance_failing = False
        self._periodic: Any = None

    def is_kernel(self, kernel_id: str) -> bool:
        return kernel_id in self._kernels

    def execution_state(self, kernel_id: str) -> str | None:
        if kernel_id not in self._kernels:
            return None
        return str(getattr(self._kernels.get_kernel(kernel_id), "execution_state", "unknown"))

    def last_cell(self, kernel_id: str) -> float | None:
        """When the kernel last ran a cell, as Jupyter itself saw it (unix time; None: not
        said): its execution clock, else (no cell run since it was watched) the kernel
        manager's ``last_activity``. Read here, in Jupyter, never from a copy of
        ``/api/sessions``."""
        if kernel_id not in self._kernels:
            return None
        executed = self._last_execution(kernel_id)
        if executed is not None:
            return executed
        moment = getattr(self._kernels.get_kernel(kernel_id), "last_activity", None)
        return moment.timestamp() if isinstance(moment, datetime) else None

    def record_notice(self, kernel_id: str, episode: str) -> float | None:
        """A JupyterLab shows the warning now; returns when the cull may act (epoch s), None
        when the cull is off or the user kept the kernel."""
        if not self.policy.on:
            return None
        now = self._clock()
        if self.kept.get(kernel_id, 0.0) > now:
            return None
        old = self.notices.get(kernel_id)
        if old is None or old.episode != episode or now - old.seen_at > self.policy.seen_gap_s:
            # A new warning, or one off every screen for too long: the grace starts now.
            if old is None and len(self.notices) >= MAX_NOTICES:
                self.notices.pop(next(iter(self.notices)))
            self.notices[kernel_id] = Notice(kernel_id, episode, now, now)
        else:  # still on screen: the grace goes on
            self.notices[kernel_id] = replace(old, seen_at=now)
        return self.notices[kernel_id].cull_at(self.policy)

    def keep(self, kernel_id: str) -> float | None:
        """"Keep this kernel": no warning and no cull until the returned time (epoch s);
        None when the cull is off."""
        if not self.policy.on:
            return None
        if kernel_id not in self.kept and len(self.kept) >= MAX_NOTICES:
            self.kept.pop(next(iter(self.kept)))
        until = self._clock() + self.policy.keep_s
        self.kept[kernel_id] = until
        self.notices.pop(kernel_id, None)
        return until

    def warnings(self) -> list[dict[str, Any]]:
        """The warnings armed now: JupyterLab shows exactly these while the cull is on."""
        return [{"kernel_id": n.kernel_id, "episode": n.episode, "shown_at": n.shown_at,
                 "cull_at": n.cull_at(self.policy),
                 "waiting_for": self.waiting.get(n.kernel_id)} for n in self.notices.values()]

    def state(self) -> dict[str, Any]:
        """What ``GET nvdashboard-idle/culls`` answers: the policy, the warnings armed and
        the culls done."""
        return {"policy": self.policy.as_json(), "warnings": self.warnings(),
                "culls": list(self.culls), "checks": self.checks}

    async def check(self) -> list[dict[str, Any]]:
        """Shut down every kernel whose notice is due and whose judgment still allows it."""
        try:
            return await self._check()
        finally:
            self.checks += 1  # counted once the pass is done

    async def _check(self) -> list[dict[str, Any]]:
        now = self._clock()
        self.waiting.clear()  # said afresh by this check, of the notices it finds armed
        for kernel_id in [k for k in self.notices if not self.is_kernel(k)]:
            del self.notices[kernel_id]  # shut down by the user, or gone
        for kernel_id in [k for k, until in self.kept.items()
                          if until <= now or not self.is_kernel(k)]:
            del self.kept[kernel_id]
        if not self.policy.on or not self.notices:
            return []
        try:
            body = await self._read_glance()
        except Exception as error:  # noqa: BLE001 - one line per outage; Jupyter carries on
            if not self._glance_failing:
                self._log.warning("nvdashboard: the GPU idle cull cannot read the GPU "
                                  "judgment (%s: %s); no kernel is shut down meanwhile",
                                  type(error).__name__, error)
            self._glance_failing = True
            self.waiting = dict.fromkeys(self.notices, "the GPU judgment cannot be read")
            return []
        self._glance_failing = False
        entries = {k.get("kernel_id"): k for k in (body or {}).get("kernels") or []
                   if isinstance(k, dict)} if isinstance(body, dict) else {}
        done = []
        for kernel_id, notice in list(self.notices.items()):
            entry = entries.get(kernel_id) or {}
            idle = entry.get("idle") if isinstance(entry.get("idle"), dict) else None
            state, activity = self.execution_state(kernel_id), self.last_cell(kernel_id)
            if episode_over(notice, idle, state, activity) is not None:
                del self.notices[kernel_id]  # that warning is spent
                continue
            now = self._clock()
            kept = why_kept(self.policy, notice, idle, state, activity, now)
            if kept:
                self.waiting[kernel_id] = kept
                continue
            cull = await self._cull(notice, entry, idle or {}, now)
            if cull is not None:
                done.append(cull)
        return done

    async def _cull(self, notice: Notice, entry: Mapping[str, Any], idle: Mapping[str, Any],
                    now: float) -> dict[str, Any] | None:
        kernel_id = notice.kernel_id
        evidence = {"kernel_id": kernel_id, "path": entry.get("path"), "idle": dict(idle),
                    "execution_state": self.execution_state(kernel_id),
                    "told_s_ago": round(now - notice.shown_at, 1),
                    "policy": self.policy.as_json()}
        try:
            result = self._kernels.shutdown_kernel(kernel_id)
            if inspect.isawaitable(result):
                await result
        except Exception as error:  # noqa: BLE001 - one line; the next pass tries again
            self._log.warning("nvdashboard: the GPU idle cull could not shut down kernel %s "
                              "(%s: %s)", kernel_id, type(error).__name__, error)
            return None
        self.notices.pop(kernel_id, None)
        self._culls_made += 1
        held = _number(idle.get("held_bytes")) or 0.0
        cull = {"id": self._culls_made, "at": now, "kernel_id": kernel_id,
                "path": str(entry.get("path") or ""), "held_bytes": held,
                "gpus": [str(g) for g in idle.get("gpus") or []],
                "idle_s": _number(idle.get("idle_s")), "told_s_ago": now - notice.shown_at,
                "signal": str(idle.get("signal") or ""), "evidence": evidence}
        self.culls.append(cull)
        self._log.warning(
            "nvdashboard: the GPU idle cull shut down kernel %s (%s): %s The user was told "
            "%.1f min before. Evidence: %s", kernel_id, cull["path"] or "?",
            idle.get("text") or "idle on its GPUs.", cull["told_s_ago"] / 60,
            json.dumps(evidence, sort_keys=True, default=str))
        return cull

    def start(self) -> None:
        """Check on Jupyter's event loop while the cull is on."""
        if not self.policy.on or self._periodic is not None:
            return
        from tornado.ioloop import PeriodicCallback

        self._periodic = PeriodicCallback(self.check, self.policy.check_interval_s * 1000)
        self._periodic.start()

    def stop(self) -> None:
        if self._periodic is not None:
            self._periodic.stop()
            self._periodic = None


def kernel_from_body(body: object) -> str | None:
    """The kernel id of a POSTed keep, or None when malformed."""
    kernel_id = body.get("kernel_id") if isinstance(body, dict) else None
    return kernel_id if isinstance(kernel_id, str) and 0 < len(kernel_id) <= MAX_ID_CHARS \
        else None


def notice_from_body(body: object) -> tuple[str, str] | None:
    """(kernel_id, episode) from a POSTed notice, or None when malformed."""
    if not isinstance(body, dict):
        return None
    kernel_id, episode = body.get("kernel_id"), body.get("episode")
    if not (isinstance(kernel_id, str) and isinstance(episode, str)
            and 0 < len(kernel_id) <= MAX_ID_CHARS and 0 < len(episode) <= MAX_ID_CHARS):
        return None
    return kernel_id, episode

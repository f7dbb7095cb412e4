"""The one sampler per process, and the bounded history every dashboard reads.

The sampler thread reads every GPU and the host once per tick and appends one
timestamped ``Sample`` to ``History``. Dashboards never touch hardware: they ask the
history for ``since(seq)`` and stream what is new, so N open tabs cost the same NVML
calls as one. Sleep is drift-corrected against the monotonic clock; a tick that runs
late skips ahead instead of bunching samples together.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .host import HostReader, HostReading
from .nvml import GpuReading, NvmlReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """Everything read in one tick. New per-tick metric families get a field of their own."""

    seq: int
    time_s: float  # unix epoch seconds at the start of the tick
    gpus: tuple[GpuReading, ...]
    host: HostReading
    # Room for per-process, MIG and GPM readings, keyed by family name.
    extra: dict[str, object] = field(default_factory=dict)


class History:
    """A thread-safe ring buffer of samples, sized by a time window."""

    def __init__(self, max_samples: int) -> None:
        self._samples: deque[Sample] = deque(maxlen=max_samples)
        self._lock = threading.Lock()
        self._next_seq = 0

    def append(self, time_s: float, gpus: tuple[GpuReading, ...], host: HostReading) -> Sample:
        with self._lock:
            sample = Sample(self._next_seq, time_s, gpus, host)
            self._next_seq += 1
            self._samples.append(sample)
            return sample

    def since(self, seq: int) -> list[Sample]:
        """Samples newer than ``seq``, oldest first; O(new samples)."""
        with self._lock:
            wanted = min(len(self._samples), self._next_seq - 1 - seq)
            if wanted <= 0:
                return []
            newest_first = list(itertools.islice(reversed(self._samples), wanted))
        newest_first.reverse()
        return newest_first

    def window(self, seconds: float) -> list[Sample]:
        """Samples from the last ``seconds``, oldest first."""
        with self._lock:
            if not self._samples:
                return []
            cutoff = self._samples[-1].time_s - seconds
            newest_first = list(itertools.takewhile(lambda s: s.time_s >= cutoff,
                                                    reversed(self._samples)))
        newest_first.reverse()
        return newest_first

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    @property
    def capacity(self) -> int:
        return self._samples.maxlen or 0

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest sample (-1 when empty)."""
        with self._lock:
            return self._next_seq - 1


class Sampler:
    """Owns the one thread that reads hardware."""

    def __init__(
        self, nvml: NvmlReader, host: HostReader, history: History, interval_s: float
    ) -> None:
        self.nvml, self.host, self.history = nvml, host, history
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.late_ticks = 0

    def tick(self) -> Sample:
        """Read everything once and store it (public so tests can drive it)."""
        started = time.time()
        self.nvml.retry_if_due()
        gpus = self.nvml.read()
        host = self.host.read()
        self.ticks += 1
        return self.history.append(started, gpus, host)

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a bug in one reading must not end the dashboards
                log.exception("sampler tick failed")
            deadline += self.interval_s
            delay = deadline - time.monotonic()
            if delay < 0:
                missed = int(-delay // self.interval_s) + 1
                self.late_ticks += missed
                deadline += missed * self.interval_s
                delay = deadline - time.monotonic()
            self._stop.wait(max(0.0, delay))

    def start(self) -> None:
        if self._thread is None:
            self.nvml.ensure_initialized()
            self._thread = threading.Thread(target=self._run, name="nvdashboard-sampler",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

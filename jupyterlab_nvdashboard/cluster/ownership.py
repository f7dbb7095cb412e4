"""Which of its host's GPUs a Dask worker reads: one reader per GPU.

* **Its own GPU.** Under dask-cuda every worker's ``CUDA_VISIBLE_DEVICES`` is a rotation of
  the host's GPUs (``0,1`` and ``1,0``); the first entry is the worker's own, the one Dask's
  NVML diagnostics (``distributed/diagnostics/nvml.py``) monitor. The worker reads it.
* **GPUs nobody owns.** A GPU that is no worker's own (no ``CUDA_VISIBLE_DEVICES``, or fewer
  workers than GPUs) is read by the host's adopter: the one worker that holds the host's
  adopter claim. So a single-worker node shows all its GPUs, and two plain workers on one
  node don't both read them, nor split them between them when they check at the same
  moment. An adopter hands a GPU over as soon as its owner appears.

The claims are ``flock`` locks on files in a folder of this user's (one file per host, GPU
and kind of claim, and one per host for its adopter): the kernel drops a dead worker's
locks, so its GPUs find a reader again at the next check, and nothing has to talk to the
scheduler. The files themselves stay (a few bytes each): removing a lock file another
process may be about to lock would let two processes hold "the same" lock.

**The folder** is ``$XDG_RUNTIME_DIR/nvdashboard-gpu-claims`` where that variable names a
folder (the XDG base directory spec: owned by the user, mode 0700), else
``<tmp>/nvdashboard-gpu-claims-<uid>``. A name in a shared folder can be planted by another
user, who would then hold the locks and leave the workers reading no GPU; so whatever the
folder, it is used only if it is a real folder (not a symlink), owned by this user, with
mode 0700. Otherwise it is refused with one log line naming the fallback: a fresh private
folder of this worker's (its claims are then not shared with the user's other workers, so
a GPU nobody owns may be read twice), removed when the worker closes. Lock files are
opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

CLAIMS_DIR_VARIABLE = "NVDASHBOARD_GPU_CLAIMS_DIR"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_claims_dir(environ: Mapping[str, str] | None = None) -> Path:
    """One folder per user (workers of one user share it): in ``$XDG_RUNTIME_DIR`` where it
    names a folder, else in the temporary folder."""
    runtime = (os.environ if environ is None else environ).get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "nvdashboard-gpu-claims"
    return Path(tempfile.gettempdir()) / f"nvdashboard-gpu-claims-{os.getuid()}"


def unsafe_reason(directory: Path) -> str | None:
    """Why ``directory`` may not hold this user's claims; None when it may."""
    try:
        found = os.lstat(directory)
    except OSError as error:
        return error.strerror or str(error)
    if stat.S_ISLNK(found.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(found.st_mode):
        return "it is not a folder"
    if found.st_uid != os.geteuid():
        return f"it is owned by uid {found.st_uid}, not {os.geteuid()}"
    if stat.S_IMODE(found.st_mode) != 0o700:
        return f"its mode is {stat.S_IMODE(found.st_mode):o}, not 700"
    return None


def claims_folder(directory: Path) -> tuple[Path, bool]:
    """(the folder to keep claims in, whether it is a private fallback): ``directory`` when
    it is safe (made if missing), else a fresh private folder, said in one log line."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        pass  # unsafe_reason says why
    problem = unsafe_reason(directory)
    if problem is None:
        return directory, False
    fallback = Path(tempfile.mkdtemp(prefix="nvdashboard-gpu-claims-"))
    log.warning("nvdashboard: GPU claims folder %s refused (%s); using %s, private to this "
                "worker (GPUs nobody owns may be read by more than one worker)",
                directory, problem, fallback)
    return fallback, True


class _Lock:
    """One exclusive, non-blocking ``flock`` on one file; held until ``release``."""

    def __init__(self, path: Path) -> None:
        self.path, self._fd = path, -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> bool:
        if self._fd >= 0:
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as error:  # a symlink planted in its place (ELOOP), or worse
            log.warning("nvdashboard: GPU claim %s not taken: %s", self.path, error)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = -1

    def free(self) -> bool:
        """Whether nobody holds it now (taken and given back at once)."""
        if self._fd >= 0:
            return False
        taken = self.acquire()
        self.release()
        return taken


class GpuClaims:
    """The claims of one worker on ``host``'s GPUs; ``update`` says which it reads now."""

    def __init__(self, host: str, directory: Path | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.directory, self._private = claims_folder(directory or default_claims_dir(environ))
        self.host = _UNSAFE.sub("_", host)
        self._locks: dict[tuple[str, str], _Lock] = {}
        # Held by one worker of the host: the one that reads the GPUs nobody owns.
        self._adopter = _Lock(self.directory / f"{self.host}.adopter")
        self.own: str | None = None  # the UUID of this worker's own GPU, if it has one

    def _lock(self, kind: str, uuid: str) -> _Lock:
        key = (kind, uuid)
        if key not in self._locks:
            name = f"{self.host}--{_UNSAFE.sub('_', uuid)}.{kind}"
            self._locks[key] = _Lock(self.directory / name)
        return self._locks[key]

    def update(self, positions: Mapping[str, int], own_first: bool,
               adopt: bool = True) -> frozenset[str]:
        """One check. ``positions``: every device CUDA shows this worker (UUID -> CUDA
        position); ``own_first``: whether position 0 is this worker's own (a
        ``CUDA_VISIBLE_DEVICES`` is set, as dask-cuda sets it); ``adopt``: whether to become
        the host's adopter, if no worker is, and take up the GPUs nobody owns or reads
        (adopted ones are kept either way). Returns the UUIDs to read."""
        own = next((uuid for uuid, at in positions.items() if at == 0), None) \
            if own_first else None
        if own != self.own and self.own is not None:
            self._lock("own", self.own).release()
            self._lock("read", self.own).release()
        self.own = own
        reading: set[str] = set()
        adopter = self._adopter.held or (adopt and self._adopter.acquire())
        # The owner waits for an adopter to hand its GPU over: never two readers at once.
        if own is not None and self._lock("own", own).acquire() and \
                self._lock("read", own).acquire():
            reading.add(own)
        for uuid in positions:
            if uuid == own:
                continue
            read = self._lock("read", uuid)
            if not self._lock("own", uuid).free():  # it has an owner: hand it over
                read.release()
            elif (read.held or adopter) and read.acquire():
                reading.add(uuid)
        for (_, uuid), lock in self._locks.items():
            if uuid not in positions:  # no longer visible here
                lock.release()
        return frozenset(reading)

    def release(self) -> None:
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()
        self._adopter.release()
        self.own = None
        if self._private:  # the fallback folder is this worker's alone, made by it
            shutil.rmtree(self.directory, ignore_errors=True)
            self._private = False

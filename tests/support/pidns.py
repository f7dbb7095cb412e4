"""A container, as far as NVDashboard can tell: a new PID namespace with a private mount
namespace, in which an openable character device stands where each ``/dev/nvidia<minor>``
would.

There is no NVIDIA driver here, so a real ``/dev/nvidia<minor>`` cannot be opened. In
production the server recognises a GPU's node by its device number: the major the driver
registers as ``nvidia-frontend`` in ``/proc/devices`` and the minor from
``nvmlDeviceGetMinorNumber`` (``metrics/device_nodes.py``). The simulated driver registers
no major, so in simulate mode the server takes whatever character device stands at
``/dev/nvidia<minor>``; here that is a bind mount of a device nobody else holds open
(``/dev/full``, ``/dev/fuse``, ``/dev/net/tun``), inside a tmpfs ``/dev`` of the namespace's
own: the host's ``/dev`` is never touched.

``PidNamespace`` starts the namespace's init (``pidns_init.py``: it builds ``/dev`` and
reaps orphans, as a container's init does), runs commands inside with ``nsenter``, and
ends everything in it by killing that init. Needs root, ``unshare`` and ``nsenter``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

# Stand-ins for /dev/nvidia0, 1, 2: openable character devices nothing else holds open.
STAND_INS = ("/dev/full", "/dev/fuse", "/dev/net/tun")
INIT = Path(__file__).with_name("pidns_init.py")


def unavailable() -> str | None:
    """Why a PID namespace cannot be made here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "new PID and mount namespaces need root (CI runs as root)"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    missing = [path for path in STAND_INS if not os.path.exists(path)]
    if missing:
        return f"no stand-in device for a GPU node: {', '.join(missing)} missing"
    return None


def namespace_of(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


class PidNamespace:
    """A running PID namespace; ``close()`` (or the with-block's end) ends all in it."""

    def __init__(self, gpus: int = 2, parent: PidNamespace | None = None) -> None:
        self.folder = tempfile.mkdtemp(prefix="nvd-pidns-")
        ready = os.path.join(self.folder, "ready")
        command = ["unshare", "--pid", "--fork", "--mount-proc", "--mount",
                   "--propagation", "private", sys.executable, str(INIT), ready,
                   *STAND_INS[:gpus]]
        if parent is not None:  # a namespace nested in ``parent`` (a container in it)
            command = parent.command(command)
        self._unshare = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if self._unshare.poll() is not None or time.monotonic() > deadline:
                error = self._unshare.stderr.read().decode() if self._unshare.stderr else ""
                self.close()
                raise RuntimeError(f"the PID namespace did not start: {error[-2000:]}")
            time.sleep(0.05)
        # Its init, as this test sees it: the process running pidns_init.py for this file.
        self.init_pid = next(p.pid for p in psutil.Process(self._unshare.pid).children(True)
                             if ready in p.cmdline() and p.cmdline()[0] == sys.executable)
        self.inode = namespace_of(self.init_pid)
        # The PID namespaces from this test's down to this one.
        self.levels: tuple[int, ...] = (*(parent.levels if parent else
                                          (namespace_of("self"),)), self.inode)

    def command(self, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """``argv`` run inside this namespace (its PIDs, its /proc and /dev)."""
        return ["nsenter", "-t", str(self.init_pid), "-p", "-m",
                f"--wd={cwd or os.getcwd()}", "--", *argv]

    def spawn(self, argv: Sequence[str], **popen: object) -> tuple[subprocess.Popen, int]:
        """Start ``argv`` inside; (the nsenter process, the started process's PID here)."""
        process = subprocess.Popen(self.command(argv), **popen)  # type: ignore[call-overload]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            children = psutil.Process(process.pid).children()
            if children:
                return process, children[0].pid
            if process.poll() is not None:
                raise RuntimeError(f"{argv[:3]} exited at once ({process.returncode})")
            time.sleep(0.02)
        raise RuntimeError(f"{argv[:3]} did not start inside the namespace")

    def holder(self, node: int, seconds: float = 600) -> tuple[subprocess.Popen, int]:
        """A process inside that holds ``/dev/nvidia<node>`` open (as CUDA would), returned
        once it does: a driver lists a process only after CUDA opened the node, and the
        server rescans a process it saw holding nothing only when the driver's lists
        change (``metrics/device_nodes.py``), so a test must not list one that has not."""
        process, pid = self.spawn([sys.executable, "-c",
                                   f"import os, time; os.open('/dev/nvidia{node}', os.O_RDWR);"
                                   f" time.sleep({seconds})"])
        deadline = time.monotonic() + 60
        while not _holds(pid, f"/dev/nvidia{node}"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the holder of /dev/nvidia{node} did not open it")
            time.sleep(0.02)
        return process, pid

    def close(self) -> None:
        # The kernel ends every process in a PID namespace when its init ends.
        try:
            for child in psutil.Process(self._unshare.pid).children():
                child.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
        try:
            self._unshare.wait(30)
        except subprocess.TimeoutExpired:
            self._unshare.kill()
            self._unshare.wait(30)
        if self._unshare.stderr:
            self._unshare.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PidNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _holds(pid: int, node: str) -> bool:
    """Whether ``pid`` holds ``node`` open (its fd links name the path it opened)."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"{folder}/{name}") == node:
                return True
        except OSError:
            continue
    return False


def namespace_pids(host_pid: int, namespace: PidNamespace | None) -> dict[str, int]:
    """The process's PID in each PID namespace that sees it, by namespace inode, from this
    test's namespace down to ``namespace``, its own (``/proc/<pid>/status`` NSpid): what the
    kernel, and so the driver, knows of it."""
    status = Path(f"/proc/{host_pid}/status").read_text()
    numbers = [int(n) for line in status.splitlines() if line.startswith("NSpid:")
               for n in line.split()[1:]]
    levels = namespace.levels if namespace is not None else (namespace_of("self"),)
    assert len(numbers) == len(levels), (numbers, levels)
    return {str(inode): number for inode, number in zip(levels, numbers, strict=True)}


def pid_inside(host_pid: int, process_namespace: PidNamespace, seen_from: PidNamespace) -> int:
    """The PID ``seen_from``'s processes know it by."""
    return namespace_pids(host_pid, process_namespace)[str(seen_from.inode)]

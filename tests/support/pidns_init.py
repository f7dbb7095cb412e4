"""The init (PID 1) of a test's PID namespace (``pidns.py``): gives the namespace a ``/dev``
of its own, with stand-in devices at ``/dev/nvidia<N>``, says it is ready, then reaps
orphans until it is killed (which ends every process in the namespace).

    python pidns_init.py READY_FILE STAND_IN_FOR_NVIDIA0 [STAND_IN_FOR_NVIDIA1 ...]

Runs as root inside ``unshare --pid --fork --mount-proc --mount --propagation private``:
every mount here is private to the namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

PLAIN = ("null", "zero", "full", "random", "urandom", "tty", "fuse")


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def build_dev(stand_ins: list[str]) -> None:
    new = tempfile.mkdtemp(prefix="nvd-dev-")
    mount("-t", "tmpfs", "-o", "mode=755", "nvd-dev", new)
    for name in PLAIN:
        if os.path.exists(f"/dev/{name}"):
            open(os.path.join(new, name), "w").close()
            mount("--bind", f"/dev/{name}", os.path.join(new, name))
    for folder in ("pts", "shm", "net"):
        os.mkdir(os.path.join(new, folder))
    mount("--rbind", "/dev/pts", os.path.join(new, "pts"))
    mount("-t", "tmpfs", "-o", "mode=1777", "shm", os.path.join(new, "shm"))
    os.symlink("pts/ptmx", os.path.join(new, "ptmx"))
    os.symlink("/proc/self/fd", os.path.join(new, "fd"))
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", os.path.join(new, name))
    # The GPUs' nodes: an openable character device where /dev/nvidia<N> stands.
    for minor, device in enumerate(stand_ins):
        node = os.path.join(new, f"nvidia{minor}")
        open(node, "w").close()
        mount("--bind", device, node)
    mount("--move", new, "/dev")
    os.rmdir(new)


def main() -> None:
    ready, stand_ins = sys.argv[1], sys.argv[2:]
    build_dev(stand_ins)
    with open(ready + ".tmp", "w") as file:
        file.write("ready")
    os.rename(ready + ".tmp", ready)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.5)


if __name__ == "__main__":
    main()

"""The Dask plugin's GPU-claims folder cannot be planted by another local user.

The default folder had a predictable name in the shared temporary folder, accepted whatever
its owner and mode: another user who made it first held the locks, and the workers read no
GPU, with nothing logged. Each planted form (another owner, mode 777, a symlink) must be
refused with one log line naming the fallback, and the worker still reads its GPUs.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest

from jupyterlab_nvdashboard.cluster.ownership import GpuClaims, default_claims_dir

GPUS = {"GPU-00000000-0000-4000-8000-000000000000": 0,
        "GPU-00000001-0000-4000-8000-000000000000": 1}


def _reads_its_gpus(folder: Path, caplog: pytest.LogCaptureFixture) -> GpuClaims:
    with caplog.at_level(logging.WARNING, logger="jupyterlab_nvdashboard.cluster.ownership"):
        claims = GpuClaims("node-a", folder)
    try:
        assert claims.update(GPUS, own_first=False) == set(GPUS)
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1 and str(folder) in refused[0] \
            and str(claims.directory) in refused[0], refused
        assert claims.directory != folder
        assert not any(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() \
            else True  # nothing written into the planted folder
    finally:
        claims.release()
    assert not claims.directory.exists()  # the private fallback goes with the worker
    return claims


def test_a_world_writable_folder_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    with tempfile.TemporaryDirectory() as home:
        planted = Path(home) / "claims"
        planted.mkdir()
        planted.chmod(0o777)
        _reads_its_gpus(planted, caplog)


def test_a_symlink_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    with tempfile.TemporaryDirectory() as home:
        target = Path(home) / "elsewhere"
        target.mkdir(mode=0o700)
        planted = Path(home) / "claims"
        planted.symlink_to(target)
        _reads_its_gpus(planted, caplog)
        assert not any(target.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a folder owned by another user "
                    "needs root (chown)")
def test_another_users_folder_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    with tempfile.TemporaryDirectory() as home:
        planted = Path(home) / "claims"
        planted.mkdir(mode=0o700)
        os.chown(planted, 65534, 65534)  # nobody
        _reads_its_gpus(planted, caplog)


def test_a_symlinked_lock_file_is_not_followed(caplog: pytest.LogCaptureFixture) -> None:
    with tempfile.TemporaryDirectory() as home:
        folder = Path(home) / "claims"
        folder.mkdir(mode=0o700)
        victim = Path(home) / "victim"
        victim.write_text("not the project's")
        claims = GpuClaims("node-a", folder)
        uuid = next(iter(GPUS))
        (folder / f"node-a--{uuid}.read").symlink_to(victim)
        try:
            with caplog.at_level(logging.WARNING):
                reading = claims.update(GPUS, own_first=False)
        finally:
            claims.release()
        assert uuid not in reading and victim.read_text() == "not the project's"


def test_the_default_folder_is_in_the_runtime_dir() -> None:
    with tempfile.TemporaryDirectory() as runtime:
        assert default_claims_dir({"XDG_RUNTIME_DIR": runtime}) == \
            Path(runtime) / "nvdashboard-gpu-claims"
    assert default_claims_dir({"XDG_RUNTIME_DIR": "relative"}).parent == \
        Path(tempfile.gettempdir())
    safe = GpuClaims("node-a", None, {"XDG_RUNTIME_DIR": tempfile.mkdtemp()})
    try:
        assert safe.directory.name == "nvdashboard-gpu-claims"
        assert oct(safe.directory.stat().st_mode & 0o777) == "0o700"
    finally:
        safe.release()
        safe.directory.rmdir()
        safe.directory.parent.rmdir()

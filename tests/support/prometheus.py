"""A real Prometheus (Debian's ``prometheus`` package, installed by .ci/install) scraping
its targets with the test token, every second, in a temp folder; and its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.bokeh_client import TEST_TOKEN
from tests.support.servers import free_port

PROMETHEUS = shutil.which("prometheus")


def api(base: str, path: str, **params: str) -> Any:
    """``GET <base>/api/v1/<path>?params``'s data; asserts the answer is a success."""
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def scrape_config(jobs: dict[str, list[str]]) -> str:
    """A configuration scraping each job's targets (host:port) once a second with the test
    token."""
    return "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n" + "".join(
        f"  - job_name: {job}\n"
        f"    authorization: {{type: Bearer, credentials: {TEST_TOKEN}}}\n"
        f"    static_configs: [{{targets: {targets!r}}}]\n" for job, targets in jobs.items())


def _answers_for(base: str, config: Path) -> bool | None:
    """Whether the Prometheus at ``base`` runs ``config``: None while nothing answers."""
    try:
        return api(base, "status/flags").get("config.file") == str(config)
    except OSError:
        return None


def start(folder: Path, config_text: str, tries: int = 3) -> tuple[subprocess.Popen, str]:
    """A Prometheus running ``config_text`` in ``folder`` (its log ``prometheus.log``), once
    it answers on its port; and its base URL. A free port can be taken by another process
    before Prometheus binds it (a neighbouring test's server, or the next Prometheus of the
    same test, which then answers for this one): such a start is retried on a new port."""
    assert PROMETHEUS is not None, "needs Debian's prometheus package"
    config = folder / "prometheus.yml"
    config.write_text(config_text)
    for _ in range(tries):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with (folder / "prometheus.log").open("a") as log:
            process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            ours = _answers_for(base, config)
            if ours:
                return process, base
            if ours is False:
                break  # another Prometheus answers on that port
            time.sleep(0.2)
        stop(process)
    raise AssertionError(f"Prometheus did not start in {tries} tries: {folder / 'prometheus.log'}")


@contextmanager
def prometheus(folder: Path, *targets: str) -> Iterator[str]:
    """Prometheus scraping ``targets`` (host:port) once a second with the test token; yields
    its base URL once it answers. Its log is ``folder/prometheus.log``."""
    process, base = start(folder, scrape_config({"nvdashboard": list(targets)}))
    try:
        yield base
    finally:
        stop(process)


def stop(process: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """End a Prometheus started by a test: SIGTERM, then SIGKILL if it lingers."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

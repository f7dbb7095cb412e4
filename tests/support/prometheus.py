"""A real Prometheus (Debian's ``prometheus`` package, installed by .ci/install) scraping
its targets with the test token, every second, in a temp folder; and its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
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


@contextmanager
def prometheus(folder: Path, *targets: str) -> Iterator[str]:
    """Prometheus scraping ``targets`` (host:port) once a second with the test token; yields
    its base URL. Its log is ``folder/prometheus.log``."""
    assert PROMETHEUS is not None, "needs Debian's prometheus package"
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: nvdashboard\n"
        f"    authorization: {{type: Bearer, credentials: {TEST_TOKEN}}}\n"
        f"    static_configs: [{{targets: {list(targets)!r}}}]\n")
    port = free_port()
    with (folder / "prometheus.log").open("w") as log:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}"
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

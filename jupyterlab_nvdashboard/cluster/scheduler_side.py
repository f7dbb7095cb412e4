"""What the dashboard asks the scheduler for, once a second, in one call.

``gpu_view`` runs on the scheduler (``Client.run_on_scheduler``) and returns only the GPU
snapshots, with each worker's last heartbeat and the identity (static facts) it reported
once, kept in the scheduler's metadata: the answer grows with the GPUs, never with
everything else the scheduler knows. It imports nothing beyond the standard library, so a
scheduler without this package still answers through ``Client.scheduler_info``
(``from_scheduler_info``), which carries the same metrics among much else.
"""

from __future__ import annotations

import time
from typing import Any

METRIC_KEY = "nvdashboard-gpus"  # cluster.METRIC_KEY, repeated so this module stands alone


def heartbeat_interval_s(workers: int) -> float:
    """``distributed.scheduler.heartbeat_interval``: how often the scheduler asks each of
    ``workers`` workers to report."""
    if workers <= 10:
        return 0.5
    if workers < 50:
        return 1.0
    if workers < 200:
        return 2.0
    return workers / 200 + 1


def gpu_view(dask_scheduler: Any = None) -> dict[str, Any]:
    workers = {}
    identities = getattr(dask_scheduler, "task_metadata", {}).get(METRIC_KEY)
    identities = identities if isinstance(identities, dict) else {}
    for address in [address for address in identities if address not in
                    dask_scheduler.workers]:
        del identities[address]  # that worker left: its identity goes with it
    for address, ws in dask_scheduler.workers.items():
        workers[address] = {"host": ws.host, "last_seen": ws.last_seen,
                            "snapshot": (ws.metrics or {}).get(METRIC_KEY),
                            "identity": identities.get(address)}
    return {"now": time.time(), "heartbeat_s": heartbeat_interval_s(len(workers)),
            "workers": workers}


def from_scheduler_info(info: dict[str, Any],
                        identities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The same answer from ``Client.scheduler_info(n_workers=-1)`` and the identities
    from ``Client.get_metadata(["nvdashboard-gpus"])``."""
    identities = identities if isinstance(identities, dict) else {}
    workers = {
        address: {"host": identity.get("host"), "last_seen": identity.get("last_seen"),
                  "snapshot": (identity.get("metrics") or {}).get(METRIC_KEY),
                  "identity": identities.get(address)}
        for address, identity in (info.get("workers") or {}).items()
    }
    return {"now": time.time(), "heartbeat_s": heartbeat_interval_s(len(workers)),
            "workers": workers}

"""Multi-node through Dask: every GPU of a cluster in one dashboard.

* ``plugin.py``: a ``WorkerPlugin`` that reads its worker's GPUs with the metrics layer
  and publishes a small snapshot (``snapshot.py``) through ``worker.metrics``, which the
  scheduler receives with every heartbeat;
* ``preload.py``: the same plugin for ``dask worker --preload``;
* ``view.py``: the dashboard server's side: one scheduler call a second, a history of the
  cluster per GPU UUID, stale and lost GPUs.

``distributed`` is an optional extra (``pip install 'jupyterlab-nvdashboard[cluster]'``);
nothing here is imported unless cluster mode is asked for.
"""

METRIC_KEY = "nvdashboard-gpus"  # the name under worker.metrics and WorkerState.metrics
PLUGIN_NAME = "nvdashboard-gpus"

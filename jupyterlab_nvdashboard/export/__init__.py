"""``/metrics``: the GPUs this server reads (or its Dask cluster's) for Prometheus.

``dcgm.py`` holds the DCGM exporter's names, types and units and turns readings into
them; ``collector.py`` is the ``prometheus_client`` collector behind the route.
``prometheus_client`` is an optional dependency, imported only when ``--metrics`` is on.
"""

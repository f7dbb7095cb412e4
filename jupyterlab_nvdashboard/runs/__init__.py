"""Workload runs as the dashboard server sees them: the server-owned workload service.

``server.py`` composes it beside the metrics (``metrics/`` knows nothing of the workload):
``watcher.py`` reads the run event files, ``launcher.py`` starts and stops the one run the
dashboard may launch, ``service.py`` puts them together over one runs directory, and
``verdict.py`` judges a run from the history samples of its own GPU.
"""

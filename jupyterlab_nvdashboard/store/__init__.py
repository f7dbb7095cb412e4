"""The history store: samples kept past the server's life, in one SQLite file.

``service.HistoryStore`` listens to the sampler's ``History`` (a consumer beside the
broadcaster and ``/metrics``; ``server.py`` composes it) and answers ``past(...)`` for
windows longer than the in-memory history. ``file.py`` opens the file safely and holds the
schema; ``buckets.py`` is the arithmetic.
"""

from .buckets import GPU_FIELDS, HOST_FIELDS, Bucket
from .file import APPLICATION_ID, SCHEMA_VERSION, StoreUnusable
from .service import (
    COARSE_TIER,
    FINE_TIER,
    TIER_WIDTHS_S,
    HistoryStore,
    PastWindow,
    StoreReadOnEventLoop,
)

__all__ = ["APPLICATION_ID", "COARSE_TIER", "FINE_TIER", "GPU_FIELDS", "HOST_FIELDS",
           "SCHEMA_VERSION", "TIER_WIDTHS_S", "Bucket", "HistoryStore", "PastWindow",
           "StoreReadOnEventLoop", "StoreUnusable"]

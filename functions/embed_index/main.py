"""embed-index (R-6.3): observation changes -> the search index, in batches.

A declaration for the worker runtime (`engram.runtime.worker`): over HTTP (Knative,
functions-framework) one event arrives per request; from JetStream a whole fetch, for which
`Indexer.handle` makes one embedding call. The model loads on the first batch, not at import.
"""

from __future__ import annotations

from engram.runtime.worker import Worker
from engram.services.indexing import decode_change

WORKER = Worker(durable="embed-index", decode=decode_change, handler=lambda s: s.indexing.handle)
embed_index = WORKER.cloud_event("embed_index")

"""extract-observation (R-5): domain events by rules, marks and chat turns -> observations.

A declaration for the worker runtime (`engram.runtime.worker`): over HTTP (Knative,
functions-framework) one event arrives per request; from JetStream a whole fetch, written per
tenant in one transaction.
"""

from __future__ import annotations

from engram.runtime.worker import Worker
from engram.services.extraction import decode_extraction

WORKER = Worker(
    durable="extract-observation",
    decode=decode_extraction,
    handler=lambda s: s.extraction.handle,
    gave_up=lambda s: s.extraction.gave_up,
    rejected=lambda s: s.extraction.rejected,
)
extract_observation = WORKER.cloud_event("extract_observation")

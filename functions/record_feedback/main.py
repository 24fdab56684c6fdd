"""record-feedback (R-9): feedback events -> counters, verification and rejections.

A declaration for the worker runtime (`engram.runtime.worker`): over HTTP (Knative,
functions-framework) one event arrives per request; from JetStream a whole fetch, folded into
one counter update per tenant that touches each observation once.
"""

from __future__ import annotations

from engram.runtime.worker import Worker
from engram.services.feedback import decode_feedback

WORKER = Worker(durable="record-feedback", decode=decode_feedback, handler=lambda s: s.feedback_recorder.handle)
record_feedback = WORKER.cloud_event("record_feedback")

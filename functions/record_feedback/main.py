"""record-feedback (R-9): a functions-framework CloudEvent function, also run from JetStream.

Over HTTP one `io.engram.feedback.recorded.v1` event arrives per request; the JetStream
runner calls `record_feedback_batch` with a whole fetch, so a batch's counter updates are
folded into one statement per tenant that touches each observation once.
"""

from __future__ import annotations

from collections.abc import Sequence

from cloudevents.http import CloudEvent
from starlette.exceptions import HTTPException

from engram.bootstrap import get_services
from engram.domain.events import InvalidEvent
from engram.runtime.cloud_event import cloud_event


@cloud_event
async def record_feedback(event: CloudEvent) -> None:
    outcome = (await record_feedback_batch([event]))[0]
    if isinstance(outcome, InvalidEvent):
        raise HTTPException(status_code=422, detail=str(outcome))  # poison: do not redeliver
    if outcome is not None:
        raise HTTPException(status_code=503, detail=str(outcome))  # transient: redeliver


async def record_feedback_batch(events: Sequence[CloudEvent]) -> list[BaseException | None]:
    services = await get_services()
    return await services.feedback_recorder.handle_batch(events)

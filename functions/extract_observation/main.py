"""extract-observation (R-5): a functions-framework CloudEvent function, also run from JetStream.

Over HTTP (Knative or `functions-framework --target extract_observation`) one event arrives
per request; the JetStream runner calls `extract_observation_batch` with a whole fetch so a
batch is written in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from cloudevents.http import CloudEvent
from starlette.exceptions import HTTPException

from engram.bootstrap import get_services
from engram.domain.events import InvalidEvent
from engram.runtime.cloud_event import cloud_event


@cloud_event
async def extract_observation(event: CloudEvent) -> None:
    outcome = (await extract_observation_batch([event]))[0]
    if isinstance(outcome, InvalidEvent):
        raise HTTPException(status_code=422, detail=str(outcome))  # poison: do not redeliver
    if outcome is not None:
        raise HTTPException(status_code=503, detail=str(outcome))  # transient: redeliver


async def extract_observation_batch(events: Sequence[CloudEvent]) -> list[BaseException | None]:
    services = await get_services()
    return await services.extraction.handle_batch(events)


async def extract_observation_gave_up(event: CloudEvent, reason: str) -> None:
    """The JetStream runner dead-lettered `event` after its last delivery failed too."""
    services = await get_services()
    await services.extraction.gave_up(event, reason)

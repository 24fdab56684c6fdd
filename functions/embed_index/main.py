"""embed-index (R-6.3): a functions-framework CloudEvent function, also run from JetStream.

Over HTTP one observation event arrives per request; the JetStream runner calls
`embed_index_batch` with a whole fetch, which makes one embedding call for the batch. The
embedding model loads on the first batch, not at import, so a cold start stays short.
"""

from __future__ import annotations

from collections.abc import Sequence

from cloudevents.http import CloudEvent
from starlette.exceptions import HTTPException

from engram.bootstrap import get_services
from engram.domain.events import InvalidEvent
from engram.runtime.cloud_event import cloud_event


@cloud_event
async def embed_index(event: CloudEvent) -> None:
    outcome = (await embed_index_batch([event]))[0]
    if isinstance(outcome, InvalidEvent):
        raise HTTPException(status_code=422, detail=str(outcome))  # poison: do not redeliver
    if outcome is not None:
        raise HTTPException(status_code=503, detail=str(outcome))  # transient: redeliver


async def embed_index_batch(events: Sequence[CloudEvent]) -> list[BaseException | None]:
    services = await get_services()
    return await services.indexing.handle_batch(events)

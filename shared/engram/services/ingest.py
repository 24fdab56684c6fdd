"""Domain CloudEvents arriving over HTTP (R-1.2): validated, stamped with the tenant, published."""

from __future__ import annotations

from typing import cast

from cloudevents.http import CloudEvent

from engram.domain.authorization import WriteRequest, authorize_write
from engram.domain.deliveries import occurrence_time
from engram.domain.errors import Forbidden, InvalidEvent, Unprocessable
from engram.domain.events import (
    OBSERVATION_MARKED,
    ObservationMarked,
    check_extension_names,
    is_engram_type,
    parse_data,
)
from engram.domain.scopes import Permission, Principal, require
from engram.domain.subjects import type_tokens
from engram.domain.text import event_fault
from engram.ports import EventBus, Published


class EventIngest:
    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    async def accept(self, principal: Principal, event: CloudEvent) -> Published:
        require(principal, Permission.create_event)
        attributes = event.get_attributes()
        for name in ("id", "source", "type", "subject", "tenantid", "userid"):
            value = attributes.get(name)
            if value is not None and (not isinstance(value, str) or not value):
                raise Unprocessable(f"body.{name}", f"the CloudEvent attribute '{name}' must be a non-empty string")
        check_extension_names(dict(attributes))
        try:  # what the event gives is dated by it (`said_at`): the workers would dead-letter it
            occurrence_time(attributes.get("time"))
        except InvalidEvent as exc:
            raise Unprocessable("body.time", str(exc)) from exc
        fault = event_fault(attributes, event.get_data())  # the same rule as the workers' decoder
        if fault is not None:
            raise InvalidEvent(fault)
        tenant = attributes.get("tenantid")
        if tenant is None:
            event["tenantid"] = principal.tenant_id
        elif tenant != principal.tenant_id:
            raise Forbidden("the event's 'tenantid' is not the caller's tenant")
        etype = str(event["type"])
        if is_engram_type(etype):
            if etype != OBSERVATION_MARKED.type:
                raise InvalidEvent(f"{etype} is internal to Engram and cannot be sent from outside")
            if not principal.is_human or principal.user_id is None:
                raise Forbidden("marking is a human action")
            if event.get("userid") not in (None, principal.user_id):
                raise Forbidden("the event's 'userid' is not the caller")
            event["userid"] = principal.user_id
            marked = cast(ObservationMarked, parse_data(etype, event.get_data()))
            # the same rule as remember and mark: no team, owner or scope remember refuses
            authorize_write(principal, WriteRequest.of(principal.user_id, marked.scope, marked.team_ids))
        else:
            type_tokens(etype)  # validates the type name
            if not isinstance(event.get_data(), dict):
                raise InvalidEvent("domain event data must be a JSON object")
            if principal.user_id and event.get("userid") is None:
                event["userid"] = principal.user_id
        return await self.bus.publish(event)

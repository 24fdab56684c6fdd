"""What a call cost: the model price table's entries, the tokens a response was billed for, and
their price in USD."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.domain.llm.messages import Usage


class ModelPrice(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)


def billed_usage(usage: Mapping[str, Any]) -> Usage:
    """A response's tokens as billed. With server-side compaction the response samples twice (the
    summary, then the answer) and `usage.iterations` lists both; the top-level fields count only
    the answer's, so the sum of the iterations is what the call cost."""
    iterations = [i for i in usage.get("iterations") or [] if isinstance(i, Mapping)]
    total = Usage()
    for part in iterations or [usage]:
        total.add(
            Usage(
                input_tokens=int(part.get("input_tokens") or 0),
                output_tokens=int(part.get("output_tokens") or 0),
                cache_creation_input_tokens=int(part.get("cache_creation_input_tokens") or 0),
                cache_read_input_tokens=int(part.get("cache_read_input_tokens") or 0),
            )
        )
    return total


def cost_usd(price: ModelPrice | None, usage: Usage) -> float:
    if price is None:
        return 0.0
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    ) / 1_000_000
    return round(total, 8)

"""The `memory.extraction` rows of one tenant batch of extract-observation (R-5.5)."""

from __future__ import annotations

from collections import defaultdict

from engram.domain.observation import TriggerSource
from engram.domain.telemetry import TelemetryRecord, record
from engram.services.extraction_plan import Planned


class ExtractionStats:
    """The `memory.extraction` rows of one tenant batch's rule, mark and chat extractions."""

    def __init__(self) -> None:
        self.rows: dict[tuple[TriggerSource, str], dict[str, int]] = defaultdict(
            lambda: {"count": 0, "dedup": 0, "units": 0, "input_tokens": 0, "output_tokens": 0, "llm_ms": 0}
        )
        self.models: dict[tuple[TriggerSource, str], str] = {}

    def duplicate(self, p: Planned) -> None:
        self.rows[p.stats_row]["dedup"] += 1

    def applied(self, p: Planned, stored: int, deduplicated: int, units: int = 0) -> None:
        if p.extracted.model:
            self.models.setdefault(p.stats_row, p.extracted.model)
        row = self.rows[p.stats_row]
        row["input_tokens"] += p.extracted.input_tokens
        row["output_tokens"] += p.extracted.output_tokens
        row["llm_ms"] += p.extracted.duration_ms
        row["dedup"] += deduplicated
        row["count"] += stored
        row["units"] += units

    def records(self, tenant: str, elapsed_ms: int) -> list[TelemetryRecord]:
        return [
            record(
                tenant,
                "memory.extraction",
                {
                    "trigger": trigger.value,
                    "count": s["count"],
                    "dedup_hits": s["dedup"],
                    "units": s["units"],
                    "model": self.models.get((trigger, key)),
                    "input_tokens": s["input_tokens"],
                    "output_tokens": s["output_tokens"],
                    "duration_ms": elapsed_ms + s["llm_ms"],
                    "status": "ok",
                },
            )
            for (trigger, key), s in self.rows.items()
        ]

"""structlog set-up: readable lines locally, JSON lines in a cluster (ENGRAM_LOG_FORMAT=json).

Every line passes `redact_secrets` (structlog) or `RedactingFilter` (the standard library's
loggers: uvicorn, asyncpg, httpx): no JWT, API or agent key, Authorization header, NKey seed,
password or message body reaches a log (`engram.domain.redaction`)."""

from __future__ import annotations

import logging
import os
import sys

import structlog
from structlog.typing import EventDict, WrappedLogger

from engram.domain.redaction import redact, scrub


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """The structlog processor: secrets by name and by pattern, message bodies by name."""
    return {k: scrub(v) if k == "event" and isinstance(v, str) else redact(v, k) for k, v in event_dict.items()}


class RedactingFilter(logging.Filter):
    """The same for standard-library records (formatted once, then scrubbed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub(record.getMessage())
        record.args = None
        return True


def configure_logging(level: str | None = None) -> None:
    level_name = (level or os.environ.get("ENGRAM_LOG_LEVEL", "INFO")).upper()
    numeric = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    as_json = os.environ.get("ENGRAM_LOG_FORMAT", "console") == "json"
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,  # last before rendering: also what an exception's text carries
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())

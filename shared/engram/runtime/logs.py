"""structlog set-up: readable lines locally, JSON lines in a cluster (ENGRAM_LOG_FORMAT=json)."""

from __future__ import annotations

import logging
import os
import sys

import structlog


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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")

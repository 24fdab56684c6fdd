"""The LLM gateway (R-8.2-R-8.4): profiles with fallbacks, backoff, recovery, priorities, tools.

`fallback` holds `LlmGateway` (one call through a task's fallback chain, cool-downs, the
priority gate), `tool_loop` its tool-use loop (`run_tools`, with `chat.compaction_fired` for
compaction blocks, R-8.3), `advisor` the `consult_advisor` tool (R-8.2) and `calls` the values
they take and give back. Callers import from `engram.services.gateway`.
"""

from engram.services.gateway.advisor import ADVISOR_TOOL
from engram.services.gateway.calls import (
    RequestSource,
    TelemetryBuffer,
    TextSink,
    Tool,
    ToolCall,
    ToolContext,
    ToolHandler,
    TurnOutcome,
)
from engram.services.gateway.fallback import LlmGateway, PriorityGate

__all__ = [
    "ADVISOR_TOOL",
    "LlmGateway",
    "PriorityGate",
    "RequestSource",
    "TelemetryBuffer",
    "TextSink",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolHandler",
    "TurnOutcome",
]

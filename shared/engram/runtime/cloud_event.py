"""Register a CloudEvent function with functions-framework only when functions-framework runs it.

The worker functions (embed-index, extract-observation, record-feedback) run two ways: as an
HTTP CloudEvent function under functions-framework (Knative), and as a JetStream pull runner
(`python -m functions.<name>`, KEDA). Importing `functions_framework` loads Flask and Werkzeug
(~0.3 s of a ~1 s worker cold start) even for the `.aio` (Starlette) variant, and the pull
runner never needs it. functions-framework's CLI and `create_app`/`create_asgi_app` import
the package before they load the function's source, so the decorator registers exactly when
the registration is read.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def cloud_event(func: F) -> F:
    """`functions_framework.aio.cloud_event(func)` if functions-framework is loaded, else `func`."""
    if "functions_framework" not in sys.modules:
        return func
    import functions_framework.aio

    return cast(F, functions_framework.aio.cloud_event(func))

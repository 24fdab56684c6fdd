"""RFC 9457 problem details: the one shape every HTTP error of Engram has."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

PROBLEM = "application/problem+json"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def problem(status: int, detail: str, *, title: str | None = None, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {
        "type": f"https://engram.dev/problems/{status}",
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    body.update({k: v for k, v in extra.items() if v is not None})
    headers = {"WWW-Authenticate": 'Bearer realm="engram"'} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)

"""Container health check of every Engram image (Dockerfile HEALTHCHECK; Kubernetes uses its own probes).

Healthy when the worker's ready file exists (`ENGRAM_READY_FILE`, created while the JetStream
pull runner consumes) or when `GET /healthz` on $PORT answers 200 (HTTP functions). Standard
library only, so it starts in milliseconds.
"""

from __future__ import annotations

import http.client
import os
import sys


def healthy() -> bool:
    ready_file = os.environ.get("ENGRAM_READY_FILE")
    if ready_file and os.path.exists(ready_file):
        return True
    conn = http.client.HTTPConnection("127.0.0.1", int(os.environ.get("PORT", "8080")), timeout=2)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(0 if healthy() else 1)

"""`python -m functions.chat_turn`: serve on $PORT (Knative sets it), 127.0.0.1 unless HOST is set."""

import os

import uvicorn

if __name__ == "__main__":
    uvicorn.run(
        "functions.chat_turn.main:app",
        host=os.environ.get("HOST", "127.0.0.1"),
        port=int(os.environ.get("PORT", "8080")),
        log_level=os.environ.get("ENGRAM_LOG_LEVEL", "info").lower(),
        proxy_headers=True,
        timeout_graceful_shutdown=60,
    )

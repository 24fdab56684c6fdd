"""`python -m functions.memory_mcp`: serve on $PORT (Knative sets it), 127.0.0.1 unless HOST is set."""

from engram.runtime.http import serve

if __name__ == "__main__":
    serve("functions.memory_mcp.main:app", graceful_seconds=20)

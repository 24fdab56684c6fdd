"""`python -m functions.embed_index`: consume the durable `embed-index`."""

from functions.embed_index.main import WORKER

if __name__ == "__main__":
    WORKER.main()

"""`python -m functions.embed_index`: consume the durable `embed-index`."""

from engram.runtime.worker import main

if __name__ == "__main__":
    main("functions.embed_index.main", "embed_index", "embed-index")

"""`python -m functions.extract_observation`: consume the durable `extract-observation`."""

from engram.runtime.worker import main

if __name__ == "__main__":
    main("functions.extract_observation.main", "extract_observation", "extract-observation")

"""`python -m functions.extract_observation`: consume the durable `extract-observation`."""

from functions.extract_observation.main import WORKER

if __name__ == "__main__":
    WORKER.main()

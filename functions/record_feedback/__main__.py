"""`python -m functions.record_feedback`: consume the durable `record-feedback`."""

from functions.record_feedback.main import WORKER

if __name__ == "__main__":
    WORKER.main()

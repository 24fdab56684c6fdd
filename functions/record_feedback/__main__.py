"""`python -m functions.record_feedback`: consume the durable `record-feedback`."""

from engram.runtime.worker import main

if __name__ == "__main__":
    main("functions.record_feedback.main", "record_feedback", "record-feedback")

"""Development: embedded PostgreSQL and NATS from PyPI wheels, and the local stack (`make run`)."""

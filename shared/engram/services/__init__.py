"""Use cases: each takes its collaborators (ports) as parameters."""

"""Adapters: one concrete technology each (PostgreSQL, pgvector, Elasticsearch, TEI, NATS, ...)."""

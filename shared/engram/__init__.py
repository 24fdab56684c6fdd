"""Engram: persistent, multi-tenant memory for AI chat assistants."""

__version__ = "0.1.0"

"""Engram: persistent, multi-tenant memory for AI chat assistants."""

from engram._nats_import import import_nats_without_aiohttp

__version__ = "0.1.0"

import_nats_without_aiohttp()

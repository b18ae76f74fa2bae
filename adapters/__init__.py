"""Adapters: the outside world (HTTP servers, collectives, torch models, environments, Ray)."""

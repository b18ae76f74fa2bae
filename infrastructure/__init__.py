"""Composition root: config loading, the dependency-injector container, logging and metrics sinks."""

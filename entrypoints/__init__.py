"""Thin entry points: parse arguments, build the container, run one use case."""

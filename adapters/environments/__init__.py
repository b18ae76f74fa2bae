"""Environments for env GRPO: the `BaseEnvironment` interface, the registry and the built-ins."""

"""Ports: the small protocols through which use cases reach the outside world."""

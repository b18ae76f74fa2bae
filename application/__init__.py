"""Use cases and the ports (typing.Protocol) they need; no framework imports."""

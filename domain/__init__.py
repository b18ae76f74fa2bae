"""Pure domain of rlsetup: value objects and rules on plain Python numbers (no torch, no I/O)."""

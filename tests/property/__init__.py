"""Property tests (hypothesis)."""

"""vLLM adapters: the HTTP client for generation and weight-sync control, and the local server process."""

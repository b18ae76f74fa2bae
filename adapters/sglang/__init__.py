"""SGLang adapters: the HTTP client for generation and weight-sync control (`rollout_backend: sglang`)."""

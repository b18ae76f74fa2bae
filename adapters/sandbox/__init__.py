"""Run untrusted (model-written) code under bubblewrap with resource limits: `Sandbox.run`."""

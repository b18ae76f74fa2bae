"""The env-GRPO learner: GRPO loss in torch, episode batching, and the trainable `TorchPolicy`."""

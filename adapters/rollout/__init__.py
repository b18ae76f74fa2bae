"""Rollout execution: the Ray actor pool that runs episodes."""

"""Glue between rlsetup and TRL's `GRPOTrainer` for online GRPO (RLVR); no TRL file is changed."""

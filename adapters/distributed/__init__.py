"""torch.distributed glue for multi-rank training (agreement between ranks)."""

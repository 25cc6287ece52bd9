"""How a training process starts: DDP ranks from a Hydra job, and the host allocator."""

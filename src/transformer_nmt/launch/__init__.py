"""How a training process starts: DDP ranks from a Hydra job, and requeueing a submitit job."""

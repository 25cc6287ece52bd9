"""How a training process starts and stops: DDP ranks from a Hydra job, stopping on a signal and
requeueing a submitit job."""

"""What a run records: experiment loggers, its overrides, ``summary.json``, and sweep reports."""

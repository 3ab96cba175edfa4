"""Exceptions the command line turns into exit statuses (kept free of heavy imports)."""


class Interrupted(Exception):
    """Training stopped on request (a preemption signal) after writing a checkpoint."""


class CheckpointMismatch(RuntimeError):
    """A checkpoint written under a different effective config: resuming would mix two runs."""

"""A multiprocessing worker for the CPU clock's tests (tests/test_trainer.py), in a module of its own: a spawned
child imports the module its target lives in, and this one imports nothing heavy (the test module imports torch,
seconds of a child's start)."""

import time


def serve(ask, told) -> None:
    """`ready`, then for each number asked, that many seconds of CPU work and `done`; it ends at None."""
    told.put("ready")
    for seconds in iter(ask.get, None):
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
        told.put("done")

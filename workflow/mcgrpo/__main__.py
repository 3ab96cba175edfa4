import sys

from mcgrpo.core.openmp import set_wait_defaults

# Before torch loads OpenMP: a short spin, then sleep (mcgrpo/core/openmp.py). A wait policy set by the user wins.
set_wait_defaults()

from mcgrpo.cli import main  # noqa: E402

sys.exit(main())

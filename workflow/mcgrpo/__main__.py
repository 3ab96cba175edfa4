import os
import sys

# Before torch loads OpenMP: threads that wait for work sleep instead of spinning, so that a job whose cores
# are shared with other work (a laptop, a shared node, two jobs on two cores) loses its share of the cores and
# no more (bench/under_load.py measures it). A value set by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from mcgrpo.cli import main  # noqa: E402

sys.exit(main())

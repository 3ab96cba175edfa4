"""Rule link_study: the study's links into the run store, and runs/store.parquet (mcgrpo.core.layout)."""

import contextlib
import sys
from pathlib import Path

from mcgrpo.core import layout
from mcgrpo.core.errors import McgrpoError

with open(snakemake.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):  # noqa: F821
    try:
        layout.link_study(snakemake.config, Path(snakemake.output[0]))  # noqa: F821 (set by Snakemake)
    except McgrpoError as e:  # a user's error: its message, no traceback
        print(f"link_study: error: {e}")
        sys.exit(2)

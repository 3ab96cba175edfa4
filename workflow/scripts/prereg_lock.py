"""Rule prereg_lock: `python -m mcgrpo prereg-lock` on the study config that Snakemake holds."""

import contextlib
import json
import sys

from mcgrpo.cli import main

config = {k: v for k, v in snakemake.config.items() if k != "analysis_only"}  # noqa: F821 (set by Snakemake)
with open(snakemake.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):  # noqa: F821
    status = main(["prereg-lock", "--config-json", json.dumps(config), "--out", snakemake.output[0]])  # noqa: F821
sys.exit(status)

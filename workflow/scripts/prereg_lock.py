"""Rule prereg_lock: `python -m mcgrpo prereg-lock` on the study config that Snakemake holds."""

import contextlib
import json
import sys

from mcgrpo.cli import main
from mcgrpo.programme import STUDIES_KEY

# In a programme, Snakemake's config is the programme's: the study's own config is kept under STUDIES_KEY (rules/
# common.smk), by study name.
study = snakemake.config.get(STUDIES_KEY, {}).get(snakemake.wildcards.study, snakemake.config)  # noqa: F821
config = {k: v for k, v in study.items() if k != "analysis_only"}
with open(snakemake.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):  # noqa: F821
    status = main(["prereg-lock", "--config-json", json.dumps(config), "--out", snakemake.output[0]])  # noqa: F821
sys.exit(status)

# mcgrpo: matched-compute evaluation of GRPO training interventions.
# `snakemake --cores 2` runs the embedded default study (config/config.yaml) end to end on the CPU.
from snakemake.utils import min_version, validate

min_version("8.0")


# A study given with --configfile replaces the default study rather than merging into it.
if not config:

    configfile: "config/config.yaml"


include: "rules/common.smk"


validate(config, "workflow/schemas/config.schema.yaml")


include: "rules/data.smk"
include: "rules/model.smk"
include: "rules/calibrate.smk"
include: "rules/train.smk"
include: "rules/drift.smk"
include: "rules/contrasts.smk"
include: "rules/figures.smk"


rule all:
    default_target: True
    input:
        FIGURES,
        TABLES,


rule analysis:
    input:
        FIGURES,
        TABLES,

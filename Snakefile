# mcgrpo: matched-compute evaluation of GRPO training interventions.
# `snakemake --cores 2` runs the embedded default study (config/config.yaml) end to end on the CPU.
from snakemake.utils import min_version, validate

min_version("8.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "rules/common.smk"
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

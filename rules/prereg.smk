# The preregistration lock, written once before the first training run: by its priority, first of the jobs ready
# (training jobs take no study's file as input: rules/train.smk).
# The config reaches the script as snakemake.config rather than as a parameter, so that editing the plan
# never re-locks the study (and so never reruns training); protected() turns any attempt into an error.
rule prereg_lock:
    output:
        protected(LOCK),
    priority: 100
    resources:
        mem_mb=CPU_RESOURCES["mem_mb"],
        runtime=CPU_RESOURCES["runtime"],
    container:
        CONTAINERS["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/prereg_lock.log",
    script:
        "../workflow/scripts/prereg_lock.py"


localrules:
    prereg_lock,  # seconds of work: no SLURM job of its own (see the Snakefile)

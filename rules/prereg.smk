# The preregistration lock, written once before the first training run: by its priority, first of the jobs ready
# (training jobs take no study's file as input: rules/train.smk).
# The config reaches the script as snakemake.config rather than as a parameter, so that editing the plan
# never re-locks the study (and so never reruns training); protected() turns any attempt into an error.
# A study whose lock exists has no lock job at all (LOCKED): Snakemake deletes a job's outputs before it runs it, and
# for root protected() stops nothing, so a prereg_lock.py newer than the lock (an update of mcgrpo: Snakemake's
# code trigger for a script), --forceall or --forcerun prereg_lock would delete the lock and lock the study again,
# demoting every planned contrast, its preregistration gone.
LOCKED = [name for name in S if os.path.lexists(LOCK.format(study=name))]


rule prereg_lock:
    output:
        protected(LOCK),
    wildcard_constraints:
        study="|".join(re.escape(name) for name in S if name not in LOCKED) or "(?!)",  # (?!): matches nothing
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

# A report figure per experiment block with FLT cells: FLT's relatedness graph (ARI, cross-group
# links, density) against the threshold gamma for both distances, from the runs' UMAP outputs, and
# the accuracy of the FLT runs at the gamma values the config trains (fedbench.results.gamma_sweep).


rule gamma_sweep_figure:
    input:
        metrics=PLAN.gamma_sweep_runs,
        partitions=PLAN.gamma_sweep_partitions,
        code=PLAN.library_sources("fedbench/results/**/*.py", "fedbench/clustering/*.py", "fedbench/run/scoring.py", "workflow/scripts/gamma_sweep.py", "workflow/scripts/common.py"),
    output:
        png=report(
            f"{RESULTS}/figures/gamma/{{experiment}}/{{dataset}}_{{partition}}_{{model}}.png",
            caption="../report/gamma_sweep.rst",
            category=PLAN.experiment_category,
            subcategory="γ sweep",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "model": "{model}", "figure": "gamma sweep"},
        ),
        csv=f"{RESULTS}/figures/gamma/{{experiment}}/{{dataset}}_{{partition}}_{{model}}.csv",
    params:
        entries=PLAN.gamma_sweep_entries,
    log:
        f"{RESULTS}/logs/figures/gamma/{{experiment}}/{{dataset}}_{{partition}}_{{model}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/gamma_sweep.py"

# Stage 3c: the figures of the runs: accuracy curves per experiment (against round, and against the
# megabytes sent with the rounds and megabytes to target), then the structure the
# clustered methods found (first seed): FLT's relatedness graph and UMAP signatures, FeSEM's and
# IFCA's cluster assignments (one rule, the kind in the file name), FeMAM's levels.


rule accuracy_curves:
    input:
        metrics=lambda w: PLAN.all_runs("metrics.json", w.experiment),
        histories=lambda w: PLAN.all_runs("history.csv", w.experiment),
        code=PLAN.results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/curves_{{experiment}}.png",
            caption="../report/accuracy_curves.rst",
            category=PLAN.experiment_category,
            subcategory="Accuracy curves",
            labels={"experiment": "{experiment}", "figure": "accuracy vs round"},
        ),
        # the same runs against the megabytes they sent, and the rounds and megabytes to target: one job
        bytes=report(
            f"{RESULTS}/figures/bytes_{{experiment}}.png",
            caption="../report/communication.rst",
            category=PLAN.experiment_category,
            subcategory="Accuracy curves",
            labels={"experiment": "{experiment}", "figure": "accuracy vs megabytes sent"},
        ),
        to_target_csv=report(
            f"{RESULTS}/tables/to_target_{{experiment}}.csv",
            caption="../report/to_target.rst",
            category=PLAN.experiment_category,
            subcategory="Accuracy curves",
            labels={"experiment": "{experiment}", "figure": "rounds and megabytes to target"},
        ),
        to_target_md=f"{RESULTS}/tables/to_target_{{experiment}}.md",
    log:
        f"{RESULTS}/logs/figures/curves_{{experiment}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/accuracy_curves.py"


rule clustering_figure:
    input:
        metrics=PLAN.run_outputs("train")["metrics"],
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=PLAN.results_sources(),
    output:
        # {figure}: "" (the relatedness graph), "_umap" (the signatures) or "_assignments" (CLUSTERING_FIGURES)
        png=report(
            PLAN.figure_pattern("adjacency"),
            caption="../report/clustering_figure.rst",
            category=PLAN.experiment_category,
            subcategory=PLAN.clustering_subcategory,
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
        ),
    wildcard_constraints:
        figure=PLAN.clustering_figure_choices(),
    params:
        kind=PLAN.clustering_kind,  # adjacency, umap or assignments
    log:
        PLAN.figure_pattern("adjacency", ext="log"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/clustering_figure.py"


rule femam_structure_figure:
    input:
        metrics=PLAN.run_outputs("train")["metrics"],
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=PLAN.results_sources(),
    output:
        structure=report(
            PLAN.figure_pattern("femam_structure", "_structure"),
            caption="../report/femam_structure.rst",
            category=PLAN.experiment_category,
            subcategory="FeMAM structure",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "figure": "levels x clients"},
        ),
        levels=report(
            PLAN.figure_pattern("femam_structure", "_levels"),
            caption="../report/femam_levels.rst",
            category=PLAN.experiment_category,
            subcategory="FeMAM structure",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "figure": "levels vs rounds"},
        ),
    log:
        PLAN.figure_pattern("femam_structure", "", "log"),
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/femam_figures.py"

# Stage 3: the runs -> results table (mean ± std over seeds) and accuracy curves per experiment.


rule results_table:
    input:
        metrics=all_runs("metrics.json"),
        code=results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/results.csv",
            caption="../report/results_table.rst",
            category="Tables",
            labels={"table": "results", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/results.md",
            caption="../report/results_table.rst",
            category="Tables",
            labels={"table": "results", "format": "Markdown"},
        ),
    log:
        f"{RESULTS}/logs/tables/results.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/results_table.py"


rule accuracy_curves:
    input:
        metrics=lambda w: all_runs("metrics.json", w.experiment),
        histories=lambda w: all_runs("history.csv", w.experiment),
        code=results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/curves_{{experiment}}.png",
            caption="../report/accuracy_curves.rst",
            category="Figures",
            subcategory="Accuracy curves",
            labels={"experiment": "{experiment}", "figure": "accuracy vs round"},
        ),
    log:
        f"{RESULTS}/logs/figures/curves_{{experiment}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/accuracy_curves.py"


rule relatedness_figure:
    input:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/metrics.json",
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/relatedness/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}.png",
            caption="../report/relatedness.rst",
            category="Client relatedness",
            subcategory="{experiment}",
            labels={"dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
        ),
    params:
        kind="adjacency",
    log:
        f"{RESULTS}/logs/figures/relatedness/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/clustering_figure.py"


rule umap_figure:
    input:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/metrics.json",
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/relatedness/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_umap.png",
            caption="../report/umap.rst",
            category="Client relatedness",
            subcategory="{experiment}",
            labels={"dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
        ),
    params:
        kind="umap",
    log:
        f"{RESULTS}/logs/figures/relatedness/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_umap.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/clustering_figure.py"


rule assignments_figure:
    input:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/metrics.json",
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/relatedness/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_assignments.png",
            caption="../report/assignments.rst",
            category="Cluster assignments",
            subcategory="{experiment}",
            labels={"dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
        ),
    params:
        kind="assignments",
    log:
        f"{RESULTS}/logs/figures/relatedness/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_assignments.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/clustering_figure.py"


rule scorecard:
    input:
        metrics=all_runs("metrics.json"),
        histories=all_runs("history.csv"),
        published=PUBLISHED_CSV,
        code=results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/scorecard.csv",
            caption="../report/scorecard.rst",
            category="Tables",
            labels={"table": "scorecard", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/scorecard.md",
            caption="../report/scorecard.rst",
            category="Tables",
            labels={"table": "scorecard", "format": "Markdown"},
        ),
        # coverage per paper and table; coverage.rst opens the report's landing page (workflow.rst)
        coverage_csv=report(
            f"{RESULTS}/tables/coverage.csv",
            caption="../report/coverage.rst",
            category="Reproduction status",
            labels={"table": "coverage", "format": "CSV"},
        ),
        coverage_md=report(
            f"{RESULTS}/tables/coverage.md",
            caption="../report/coverage.rst",
            category="Reproduction status",
            labels={"table": "coverage", "format": "Markdown"},
        ),
        coverage_rst=f"{RESULTS}/tables/coverage.rst",
    log:
        f"{RESULTS}/logs/tables/scorecard.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/scorecard.py"


rule femam_structure_figure:
    input:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/metrics.json",
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=results_sources(),
    output:
        structure=report(
            f"{RESULTS}/figures/femam/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_structure.png",
            caption="../report/femam_structure.rst",
            category="FeMAM structure",
            subcategory="{experiment}",
            labels={"dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "figure": "levels x clients"},
        ),
        levels=report(
            f"{RESULTS}/figures/femam/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_levels.png",
            caption="../report/femam_levels.rst",
            category="FeMAM structure",
            subcategory="{experiment}",
            labels={"dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "figure": "levels vs rounds"},
        ),
    log:
        "logs/figures/femam/{experiment}/{dataset}_{partition}_{model}_{algorithm}_seed{seed}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/femam_figures.py"

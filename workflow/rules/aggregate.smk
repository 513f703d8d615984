# Stage 3: the runs -> results table (mean ± std over seeds) and accuracy curves per experiment.


rule results_table:
    input:
        metrics=all_runs("metrics.json"),
        code=results_sources(),
    output:
        # every experiment's rows; the report shows each paper's own (rule paper_results_table)
        csv=f"{RESULTS}/tables/results.csv",
        md=f"{RESULTS}/tables/results.md",
    params:
        # runs of the experiments only_experiments leaves out, already on disk: merged, not dropped
        left_out=runs_left_out("metrics.json"),
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
            category=experiment_category,
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
            category=experiment_category,
            subcategory="Client relatedness",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
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
            category=experiment_category,
            subcategory="Client relatedness",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
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
            category=experiment_category,
            subcategory="Cluster assignments",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "seed": "{seed}"},
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
        # every linked experiment's rows; the report shows each paper's own (rule paper_scorecard)
        csv=f"{RESULTS}/tables/scorecard.csv",
        md=f"{RESULTS}/tables/scorecard.md",
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
            category=experiment_category,
            subcategory="FeMAM structure",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "figure": "levels x clients"},
        ),
        levels=report(
            f"{RESULTS}/figures/femam/{{experiment}}/{{dataset}}_{{partition}}_{{model}}_{{algorithm}}_seed{{seed}}_levels.png",
            caption="../report/femam_levels.rst",
            category=experiment_category,
            subcategory="FeMAM structure",
            labels={"experiment": "{experiment}", "dataset": "{dataset}", "partition": "{partition}", "algorithm": "{algorithm}", "figure": "levels vs rounds"},
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


# ---- the report by paper: each paper's category holds its own rows of the tables --------------


rule paper_results_table:
    input:
        csv=f"{RESULTS}/tables/results.csv",
        code=results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/{{paper}}/results.csv",
            caption="../report/results_table.rst",
            category=lambda w: category(w.paper),
            subcategory="Tables",
            labels={"table": "results", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/{{paper}}/results.md",
            caption="../report/results_table.rst",
            category=lambda w: category(w.paper),
            subcategory="Tables",
            labels={"table": "results", "format": "Markdown"},
        ),
    params:
        experiments=lambda w: paper_experiments(config, w.paper),
        guide=lambda w: GUIDES[w.paper],  # the caption's "look for"
    log:
        f"{RESULTS}/logs/tables/{{paper}}_results.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/paper_tables.py"


rule paper_scorecard:
    input:
        csv=f"{RESULTS}/tables/scorecard.csv",
        code=results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/{{paper}}/scorecard.csv",
            caption="../report/scorecard.rst",
            category=lambda w: category(w.paper),
            subcategory="Tables",
            labels={"table": "scorecard", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/{{paper}}/scorecard.md",
            caption="../report/scorecard.rst",
            category=lambda w: category(w.paper),
            subcategory="Tables",
            labels={"table": "scorecard", "format": "Markdown"},
        ),
    params:
        experiments=lambda w: paper_experiments(config, w.paper),
        guide=lambda w: GUIDES[w.paper],  # the caption's "look for"
    log:
        f"{RESULTS}/logs/tables/{{paper}}_scorecard.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/paper_tables.py"

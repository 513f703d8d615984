# Stage 3a: the runs -> the results table (mean ± std over seeds, every experiment), then each
# paper's own rows of it for the report (one category per paper, fedbench.results.papers).


rule results_table:
    input:
        metrics=PLAN.all_runs("metrics.json"),
        code=PLAN.results_sources(),
    output:
        # every experiment's rows; the report shows each paper's own (rule paper_results_table)
        csv=f"{RESULTS}/tables/results.csv",
        md=f"{RESULTS}/tables/results.md",
    params:
        # runs of the experiments only_experiments leaves out, already on disk: merged, not dropped
        left_out=PLAN.runs_left_out("metrics.json"),
    log:
        f"{RESULTS}/logs/tables/results.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/results_table.py"


rule paper_results_table:
    input:
        csv=f"{RESULTS}/tables/results.csv",
        code=PLAN.results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/{{paper}}/results.csv",
            caption="../report/results_table.rst",
            category=PLAN.paper_category,
            subcategory="Tables",
            labels={"table": "results", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/{{paper}}/results.md",
            caption="../report/results_table.rst",
            category=PLAN.paper_category,
            subcategory="Tables",
            labels={"table": "results", "format": "Markdown"},
        ),
    params:
        experiments=PLAN.paper_experiments,
        guide=PLAN.paper_guide,  # the caption's "look for"
    log:
        f"{RESULTS}/logs/tables/{{paper}}_results.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/paper_tables.py"

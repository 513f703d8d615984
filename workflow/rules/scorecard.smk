# Stage 3b: the runs -> the paper-vs-reproduction scorecard and the coverage per paper and table
# (experiments that link to published numbers), then each paper's own rows of the scorecard.


rule scorecard:
    input:
        metrics=PLAN.all_runs("metrics.json"),
        histories=PLAN.all_runs("history.csv"),
        published=PUBLISHED_CSV,
        code=PLAN.results_sources(),
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
    params:
        left_out=PLAN.left_out,  # missing_data: skip's cells left out, listed at the end of scorecard.md
    log:
        f"{RESULTS}/logs/tables/scorecard.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/scorecard.py"


rule paper_scorecard:
    input:
        csv=f"{RESULTS}/tables/scorecard.csv",
        code=PLAN.results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/{{paper}}/scorecard.csv",
            caption="../report/scorecard.rst",
            category=PLAN.paper_category,
            subcategory="Tables",
            labels={"table": "scorecard", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/{{paper}}/scorecard.md",
            caption="../report/scorecard.rst",
            category=PLAN.paper_category,
            subcategory="Tables",
            labels={"table": "scorecard", "format": "Markdown"},
        ),
    params:
        experiments=PLAN.paper_experiments,
        guide=PLAN.paper_guide,  # the caption's "look for"
    log:
        f"{RESULTS}/logs/tables/{{paper}}_scorecard.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/paper_tables.py"


# missing_data: skip: the cells left out because their data is not on disk, each with the reason
# (fedbench.planning.missing_data); in the report beside the coverage, and at the end of scorecard.md.
rule left_out:
    output:
        csv=report(
            f"{RESULTS}/tables/left_out.csv",
            caption="../report/left_out.rst",
            category="Reproduction status",
            labels={"table": "cells left out", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/left_out.md",
            caption="../report/left_out.rst",
            category="Reproduction status",
            labels={"table": "cells left out", "format": "Markdown"},
        ),
    params:
        rows=PLAN.left_out,
    log:
        f"{RESULTS}/logs/tables/left_out.log",
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/left_out.py"

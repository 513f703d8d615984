# The papers' claims (config ``claims:``, fedbench.results.claims): one table per paper, evaluated
# from the runs of the experiments its claims name; first in the paper's report category.

rule paper_claims:
    input:
        metrics=lambda w: claims_runs(w, "metrics.json"),
        histories=lambda w: claims_runs(w, "history.csv"),  # the global model's round (global_accuracy)
        published=PUBLISHED_CSV,
        code=results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/{{paper}}/claims.csv",
            caption="../report/claims.rst",
            category=lambda w: category(w.paper),
            subcategory="0. Claims",  # the report sorts subcategories by name: first
            labels={"table": "claims", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/{{paper}}/claims.md",
            caption="../report/claims.rst",
            category=lambda w: category(w.paper),
            subcategory="0. Claims",
            labels={"table": "claims", "format": "Markdown"},
        ),
    log:
        f"{RESULTS}/logs/tables/{{paper}}_claims.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/claims.py"

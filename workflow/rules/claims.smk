# The papers' claims (config ``claims:``, fedbench.results.claims): one table per paper, evaluated
# from the runs of the experiments its claims name; first in the paper's report category.

from fedbench.results.claims import evaluated_claims


def claimed_experiments(paper=None):
    """The experiments with cells that a claim (of ``paper``, or any) is tested on."""
    with_cells = {c.experiment for c in CELLS}
    return {config["claims"][name]["experiment"] for name in evaluated_claims(config, paper)} & with_cells


def claims_files():
    """Per paper with a claim on an experiment that has cells: its claims table (CSV, Markdown)."""
    papers = config_papers(config, claimed_experiments())
    return [f"{RESULTS}/tables/{p}/claims.{ext}" for p in papers for ext in ("csv", "md")]


def claims_runs(wildcards, name):
    """``name`` (metrics.json, history.csv) of every run of the paper's claimed experiments."""
    experiments = claimed_experiments(wildcards.paper)
    return [run_file(c, name) for c in CELLS if c.experiment in experiments]


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

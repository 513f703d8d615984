# The papers' claims (config ``claims:``, fedbench.results.claims): one table per paper, evaluated
# from the runs of the experiments its claims name; first in the paper's report category.  Claims are
# decided look by look (fedbench.results.sequential): each look is a checkpoint that reads the runs of
# the claims still open at the design's next seed count and says which stay open, so the seeds a
# claim gets depend on how its earlier seeds came out; at the paper's setting and, for a tuned
# experiment, tuned (tune.smk).


checkpoint claims_look:
    input:
        metrics=lambda w: PLAN.look_runs(w.paper, w.setting, int(w.look), "metrics.json"),
        histories=lambda w: PLAN.look_runs(w.paper, w.setting, int(w.look), "history.csv"),  # global_accuracy's round
        previous=lambda w: PLAN.previous_look(w.paper, w.setting, int(w.look)),
        published=PUBLISHED_CSV,
    output:
        f"{RESULTS}/claims/{{paper}}/{{setting}}/look{{look}}.json",
    log:
        f"{RESULTS}/logs/claims/{{paper}}_{{setting}}_look{{look}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/claims_look.py"


rule paper_claims:
    input:
        metrics=lambda w: PLAN.claims_runs(w, "metrics.json"),
        histories=lambda w: PLAN.claims_runs(w, "history.csv"),  # the global model's round (global_accuracy)
        tuned_metrics=lambda w: PLAN.claims_runs(w, "metrics.json", "tuned"),
        tuned_histories=lambda w: PLAN.claims_runs(w, "history.csv", "tuned"),
        looks=PLAN.claims_looks,
        published=PUBLISHED_CSV,
        code=PLAN.results_sources(),
    output:
        csv=report(
            f"{RESULTS}/tables/{{paper}}/claims.csv",
            caption="../report/claims.rst",
            category=PLAN.paper_category,
            subcategory="0. Claims",  # the report sorts subcategories by name: first
            labels={"table": "claims", "format": "CSV"},
        ),
        md=report(
            f"{RESULTS}/tables/{{paper}}/claims.md",
            caption="../report/claims.rst",
            category=PLAN.paper_category,
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

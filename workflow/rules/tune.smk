# Stage 2b: fair tuning (an experiment's ``tune:`` block, fedbench.tuning.trials): every algorithm entry gets
# the same number of trials on the tuning seeds, each an ordinary cell run with part of every client's
# training rows held out for validation; selection reads the validation rows only; the chosen setting
# is re-run on the config's seeds (and the seeds the claims add) under tuned/.


use rule train_cell as tune_trial with:
    output:
        **PLAN.run_outputs("trial"),
    params:
        settings=PLAN.trial_settings,
        job=lambda wildcards, input: PLAN.training_job("trial", wildcards, input),
    log:
        PLAN.run_log("trial"),
    benchmark:
        PLAN.run_benchmark("trial")
    priority: PLAN.run_priority("trial")  # claims first (fedbench.planning.workflow.RUN_PRIORITY)


rule tune_select:
    input:
        histories=lambda w: PLAN.trial_files(w, "history.csv"),
        metrics=lambda w: PLAN.trial_files(w, "metrics.json"),
    output:
        chosen=f"{RESULTS}/tuning/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/chosen.json",
        trials=f"{RESULTS}/tuning/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/trials.csv",
    params:
        tune=lambda w: config["experiments"][w.experiment]["tune"],
    log:
        f"{RESULTS}/logs/tune/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/select.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/tune_select.py"


use rule train_cell as train_tuned with:
    input:
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.npz",
        summary=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        encoder=PLAN.encoder_inputs,
        chosen=f"{RESULTS}/tuning/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/chosen.json",
    output:
        **PLAN.run_outputs("tuned"),
    params:
        settings=PLAN.cell_settings,
        job=lambda wildcards, input: PLAN.training_job("tuned", wildcards, input),
        reuse=PLAN.reusable_run,  # the paper-setting run with the same numbers, where tuning chose its setting
    log:
        PLAN.run_log("tuned"),
    benchmark:
        PLAN.run_benchmark("tuned")
    priority: PLAN.run_priority("tuned")  # claims first (fedbench.planning.workflow.RUN_PRIORITY)


rule tuning_figure:
    input:
        trials=lambda w: PLAN.tuning_files(w.experiment, "trials.csv"),
        code=PLAN.results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/tuning_{{experiment}}.png",
            caption="../report/tuning_figure.rst",
            category=PLAN.experiment_category,
            subcategory="Tuning",
            labels={"experiment": "{experiment}", "figure": "validation accuracy vs knob"},
        ),
    params:
        title=lambda w: f"experiment {w.experiment}: tuning trials",
    log:
        f"{RESULTS}/logs/figures/tuning_{{experiment}}.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/tuning_figure.py"


# The same figure for the claims alone (rule claims): the trials of the methods the tuned claims compare,
# which the claims target runs anyway, without the trials of every other tuned method.
use rule tuning_figure as claims_tuning_figure with:
    input:
        trials=PLAN.claims_tuning_trials,
        code=PLAN.results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/claims/tuning_{{experiment}}.png",
            caption="../report/tuning_figure.rst",
            category=PLAN.experiment_category,
            subcategory="Tuning",
            labels={"experiment": "{experiment}", "figure": "validation accuracy vs knob, claimed methods"},
        ),
    params:
        title=lambda w: f"experiment {w.experiment}: tuning trials of the methods its claims compare",
    log:
        f"{RESULTS}/logs/figures/claims_tuning_{{experiment}}.log",

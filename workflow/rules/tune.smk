# Stage 2b: fair tuning (an experiment's ``tune:`` block, fedbench.tuning.trials): every algorithm entry gets
# the same number of trials on the tuning seeds, each an ordinary cell run with part of every client's
# training rows held out for validation; selection reads the validation rows only; the chosen setting
# is re-run on the config's seeds (and the seeds the claims add) under tuned/.


rule tune_trial:
    input:
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.npz",
        summary=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        encoder=encoder_inputs,
    output:
        metrics=f"{TRIALS}/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/trial{{trial}}/seed{{seed}}/metrics.json",
        history=f"{TRIALS}/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/trial{{trial}}/seed{{seed}}/history.csv",
        clients=f"{TRIALS}/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/trial{{trial}}/seed{{seed}}/clients.csv",
    params:
        settings=trial_cell_settings,
    log:
        f"{RESULTS}/logs/tune/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/trial{{trial}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tune/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/trial{{trial}}/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/tune_trial.py"


rule tune_select:
    input:
        histories=lambda w: trial_files(w, "history.csv"),
        metrics=lambda w: trial_files(w, "metrics.json"),
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


rule train_tuned:
    input:
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.npz",
        summary=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        encoder=encoder_inputs,
        chosen=f"{RESULTS}/tuning/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/chosen.json",
    output:
        metrics=f"{RESULTS}/tuned/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/metrics.json",
        history=f"{RESULTS}/tuned/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/history.csv",
        clients=f"{RESULTS}/tuned/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/clients.csv",
    params:
        settings=cell_settings,
    log:
        f"{RESULTS}/logs/tuned/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/tuned/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}.tsv"
    threads: 1
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/train_tuned.py"


rule tuning_figure:
    input:
        trials=lambda w: tuning_files(w.experiment, "trials.csv"),
        code=results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/tuning_{{experiment}}.png",
            caption="../report/tuning_figure.rst",
            category=experiment_category,
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
        trials=lambda w: [f"{RESULTS}/tuning/{e}/{d}/{p}/{m}/{a}/trials.csv"
                          for e, d, p, m, a in claims_tuning_blocks() if e == w.experiment],
        code=results_sources(),
    output:
        png=report(
            f"{RESULTS}/figures/claims/tuning_{{experiment}}.png",
            caption="../report/tuning_figure.rst",
            category=experiment_category,
            subcategory="Tuning",
            labels={"experiment": "{experiment}", "figure": "validation accuracy vs knob, claimed methods"},
        ),
    params:
        title=lambda w: f"experiment {w.experiment}: tuning trials of the methods its claims compare",
    log:
        f"{RESULTS}/logs/figures/claims_tuning_{{experiment}}.log",

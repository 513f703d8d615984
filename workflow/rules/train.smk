# Stage 2: train and evaluate one run.  One rule, train_cell (a cell at the paper's setting); its two
# variants below, tune_trial (a tuning trial) and train_tuned (the chosen setting re-run), differ only in
# where they write and what they are given.  Each job receives what the plan resolved for it (params.job:
# the cell, its kind, the device it trains on and why: fedbench.planning.workflow); params.settings are the
# config entries the params rerun trigger compares (the job's own is derived from its inputs, so not).


rule train_cell:
    input:
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.npz",
        summary=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",  # sizes mem_mb and runtime
        encoder=PLAN.encoder_inputs,
    output:
        **PLAN.run_outputs("train"),
    params:
        settings=PLAN.cell_settings,
        job=lambda wildcards, input: PLAN.training_job("train", wildcards, input),
    log:
        PLAN.run_log("train"),
    benchmark:
        PLAN.run_benchmark("train")
    threads: 1
    # ahead of the tuned runs: one whose tuning chose the configured setting copies this run
    priority: PLAN.run_priority("train")  # claims first (fedbench.planning.workflow.RUN_PRIORITY)
    resources:
        # from the cost model (fedbench/cost/, config/throughputs.yaml); docs/cluster.md, "Cost and resources"
        mem_mb=PLAN.train_mem_mb,
        runtime=PLAN.train_runtime,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/train.py"

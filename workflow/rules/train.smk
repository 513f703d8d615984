# Stage 2: train and evaluate one cell (experiment x dataset x partition x model x algorithm x seed).


rule train_cell:
    input:
        partition=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.npz",
        summary=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",  # sizes mem_mb and runtime
        encoder=encoder_inputs,
    output:
        metrics=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/metrics.json",
        history=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/history.csv",
        clients=f"{RESULTS}/runs/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}/clients.csv",
    params:
        settings=cell_settings,
    log:
        f"{RESULTS}/logs/train/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{experiment}}/{{dataset}}/{{partition}}/{{model}}/{{algorithm}}/seed{{seed}}.tsv"
    threads: 1
    # ahead of the tuned runs: one whose tuning chose the configured setting copies this run (train_tuned.py)
    priority: 1
    resources:
        # from the cost model (fedbench/cost/model.py, config/throughputs.yaml); docs/cluster.md, "Cost and resources"
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/train.py"

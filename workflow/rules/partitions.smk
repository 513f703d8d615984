# Stage 1: datasets -> per-client train/test index partitions, one per dataset x partition x seed.


rule partition:
    output:
        npz=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.npz",
        json=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
    params:
        settings=PLAN.partition_settings,
    log:
        f"{RESULTS}/logs/partitions/{{dataset}}/{{partition}}/seed{{seed}}.log",
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/partition.py"


rule partition_heatmap:
    input:
        json=f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.json",
        code=PLAN.results_sources(),
    output:
        png=report(
            f"{RESULTS}/partitions/{{dataset}}/{{partition}}/seed{{seed}}.png",
            caption="../report/partition_heatmap.rst",
            category=PLAN.partition_category,
            subcategory="Partitions",
            labels={"dataset": "{dataset}", "partition": "{partition}", "seed": "{seed}"},
        ),
    log:
        f"{RESULTS}/logs/partitions/{{dataset}}/{{partition}}/seed{{seed}}_heatmap.log",
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/fedbench.yaml"
    script:
        "../scripts/partition_heatmap.py"

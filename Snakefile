# fedbench: datasets -> partitions -> one training run per cell -> tables, figures, report.
#
#   snakemake --cores all                     everything in config/config.yaml
#   snakemake --cores 1 partitions|encoders|train|tables      (tables: results, scorecard, figures)
#   snakemake --cores 1 results/runs/<experiment>/<dataset>/<partition>/<model>/<algorithm>/seed<N>/metrics.json
#   snakemake --report reports/fedbench.html

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from fedbench.config import check_config

min_version("8.10")


configfile: "config/config.yaml"


# A bad config stops here, before any job: structure and types first, then names and parameters.
validate(config, "workflow/schemas/config.schema.yaml")
try:
    check_config(config)
except ValueError as error:
    raise WorkflowError(f"Invalid fedbench config: {error}")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


wildcard_constraints:
    experiment=name_choices("experiments"),
    dataset=name_choices("datasets"),
    partition=name_choices("partitions"),
    model=name_choices("models"),
    algorithm=name_choices("algorithms"),
    encoder=name_choices("encoders"),
    seed=r"\d+",


include: "workflow/rules/partitions.smk"
include: "workflow/rules/encoders.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"


rule partitions:
    input:
        npz=all_partitions("npz"),
        heatmaps=all_partitions("png"),


rule encoders:
    input:
        pt=all_encoders(".pt"),
        curves=all_encoders("_loss.png"),


rule train:
    input:
        metrics=all_runs("metrics.json"),


rule tables:
    input:
        tables=table_files(),
        scorecard=scorecard_files(),
        curves=curve_figures(),
        relatedness=clustering_figures("adjacency"),
        umap=clustering_figures("umap"),
        assignments=clustering_figures("assignments"),
        femam=femam_figures(),


rule all:
    default_target: True
    input:
        rules.partitions.input,
        rules.encoders.input,
        rules.train.input,
        rules.tables.input,

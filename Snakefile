# fedbench: datasets -> partitions -> one training run per cell -> tables, figures, report.
#
#   snakemake --cores all                     everything in config/config.yaml
#   snakemake --cores 1 partitions|encoders|train|tables      (tables: results, scorecard, figures)
#   snakemake --cores 1 results/runs/<experiment>/<dataset>/<partition>/<model>/<algorithm>/seed<N>/metrics.json
#   snakemake --report reports/fedbench.html

from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from fedbench.config import validate_config
from fedbench.validation import ConfigFileError

min_version("8.10")


configfile: "config/config.yaml"


# A bad config stops here, before any job, with one line naming the entry, the problem and the
# valid choices: repeated keys, then structure and types (schema), then names, parameter values,
# grids and published links.  A schema violation's full report goes to CONFIG_ERROR_LOG.
CONFIG_ERROR_LOG = Path(".snakemake/log/fedbench_config_error.log")
try:
    validate_config(
        config,
        workflow.configfiles,
        schema=Path(workflow.basedir) / "workflow/schemas/config.schema.yaml",
        published_csv=Path(workflow.basedir) / "config/published_results.csv",
    )
except ConfigFileError as error:
    CONFIG_ERROR_LOG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG_ERROR_LOG.write_text(f"{error.detail}\n")
    raise WorkflowError(f"Invalid fedbench config: {error} (full report: {CONFIG_ERROR_LOG})")
except ValueError as error:
    raise WorkflowError(f"Invalid fedbench config: {error}")
validate(config, "workflow/schemas/config.schema.yaml")  # fills in the schema's defaults


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
    paper="|".join(PAPERS),


include: "workflow/rules/partitions.smk"
include: "workflow/rules/encoders.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/gamma_sweep.smk"
include: "workflow/rules/claims.smk"


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


# The runs are inputs of `tables` itself: Snakemake does not rebuild a deleted intermediate file
# (a cell's metrics.json) when the table made from it is still newer than the files that remain,
# so without them `tables` would serve a table of runs that are no longer on disk.
rule tables:
    input:
        runs=all_runs("metrics.json"),
        histories=all_runs("history.csv"),
        tables=table_files(),
        scorecard=scorecard_files(),
        by_paper=paper_table_files(),
        curves=curve_figures(),
        relatedness=clustering_figures("adjacency"),
        umap=clustering_figures("umap"),
        assignments=clustering_figures("assignments"),
        femam=femam_figures(),
        gamma=gamma_sweep_figures(),
        claims=claims_files(),


rule all:
    default_target: True
    input:
        rules.partitions.input,
        rules.encoders.input,
        rules.train.input,
        rules.tables.input,

# fedbench: datasets -> partitions -> one training run per cell -> tables, figures, report.
#
#   snakemake --cores all                     everything in config/config.yaml
#   snakemake --cores 1 partitions|encoders|train|tune|tables|claims (tables: results, scorecard, figures, claims)
#   snakemake --cores 1 results/runs/<experiment>/<dataset>/<partition>/<model>/<algorithm>/seed<N>/metrics.json
#   snakemake --report reports/fedbench.html

from snakemake.utils import min_version

min_version("8.10")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


# The config's validation (a bad config stops here, before any job), then the shared helpers.
include: "workflow/rules/common.smk"


wildcard_constraints:
    experiment=PLAN.name_choices("experiments"),
    dataset=PLAN.name_choices("datasets"),
    partition=PLAN.name_choices("partitions"),
    model=PLAN.name_choices("models"),
    algorithm=PLAN.name_choices("algorithms"),
    encoder=PLAN.name_choices("encoders"),
    seed=r"\d+",
    trial=r"\d+",
    look=r"\d+",
    setting="paper|tuned",
    paper=PLAN.paper_choices(),


# The stages, in order (one file each under workflow/rules/).
include: "workflow/rules/partitions.smk"  # 1: datasets -> client partitions (+ heatmaps)
include: "workflow/rules/encoders.smk"  # 1b: FLT's pretrained encoders
include: "workflow/rules/train.smk"  # 2: one training run per cell
include: "workflow/rules/tune.smk"  # 2b: tuning trials, the chosen settings, the tuned runs
include: "workflow/rules/tables.smk"  # 3a: results table, per paper
include: "workflow/rules/scorecard.smk"  # 3b: published vs reproduced, coverage
include: "workflow/rules/figures.smk"  # 3c: accuracy curves, clustering and FeMAM structure figures
include: "workflow/rules/gamma_sweep.smk"  # 3d: FLT's gamma sweep
include: "workflow/rules/claims.smk"  # 3e: the papers' claims, per paper
# The report: `snakemake --report` (landing page workflow/report/workflow.rst, a caption per output).


# The targets a user types (`snakemake <target>`):

# Every partition of the config and its heatmap.
rule partitions:
    input:
        npz=PLAN.partitions("npz"),
        heatmaps=PLAN.partitions("png"),


# Every pretrained encoder and its loss curve.
rule encoders:
    input:
        pt=PLAN.encoders(".pt"),
        curves=PLAN.encoders("_loss.png"),


# Every cell's training run.
rule train:
    input:
        metrics=PLAN.all_runs("metrics.json"),


# Every tuned experiment's trials, chosen settings, tuned runs and sensitivity figure.
rule tune:
    input:
        chosen=PLAN.tuning_files(None, "chosen.json"),
        runs=PLAN.tuned_runs("metrics.json"),
        figures=PLAN.tuning_figures(),


# Tables, scorecard, figures and claims, with the runs they are made from.  The runs are inputs of
# `tables` itself: Snakemake does not rebuild a deleted intermediate file (a cell's metrics.json)
# when the table made from it is still newer than the files that remain, so without them `tables`
# would serve a table of runs that are no longer on disk.
rule tables:
    input:
        runs=PLAN.all_runs("metrics.json"),
        histories=PLAN.all_runs("history.csv"),
        tables=PLAN.table_files(),
        scorecard=PLAN.scorecard_files(),
        by_paper=PLAN.paper_table_files(),
        curves=PLAN.curve_figures(),
        communication=PLAN.communication_figures(),
        relatedness=PLAN.clustering_figures("adjacency"),
        umap=PLAN.clustering_figures("umap"),
        assignments=PLAN.clustering_figures("assignments"),
        femam=PLAN.femam_figures(),
        gamma=PLAN.gamma_sweep_figures(),
        claims=PLAN.claims_files(),
        left_out=PLAN.left_out_files(),  # missing_data: skip: the cells not run, with the reason


# The papers' claims alone: only the runs, tuning trials and looks the claims read (a claims table
# needs neither the algorithms no claim compares nor the grid's figures; its sensitivity figure draws the
# compared methods' trials only), so re-measuring the claims costs what they need.  `tables` and `all`
# still build every claim with the rest of the grid.
rule claims:
    input:
        claims=PLAN.claims_files(),
        sensitivity=PLAN.claims_tuning_figures(),


# Everything above (the default target).
rule all:
    default_target: True
    input:
        rules.partitions.input,
        rules.encoders.input,
        rules.train.input,
        rules.tune.input,
        rules.tables.input,

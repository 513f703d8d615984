# Included first by the Snakefile: the config's validation, then the helpers shared by the rule
# files (cell expansion, output paths, library sources per stage).
# Validation, functions and constants only; the rules live in the other files.

import functools
import glob
import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from fedbench.config.cells import Cell, expand_cells, expand_partitions, identity_training, resolve_cell
from fedbench.cost.model import cell_cost, estimated_shape, runtime_minutes, summary_shape
from fedbench.engine.memory import MemoryBudgetError
from fedbench.cost.memory import check_one_client_fits
from fedbench.results.papers import GUIDES, PAPERS, category, config_papers, experiment_paper, paper_experiments, shared_category
from fedbench.results.claims import claim_algorithms, claim_cells, claims_design, design_seeds, evaluated_claims
from fedbench.tuning.trials import trial_config, tune_block, tuned_experiments
from fedbench.planning.validate import Workplace, validate_config
from fedbench.planning.preflight import plan_device
from fedbench.config.files import ConfigFileError


def train_gpus():
    """GPUs a training job requests (``--set-resources train_cell:gpu=1``, the SLURM profile's ``gpu: 1``)."""
    train_resources = workflow.resource_settings.overwrite_resources.get("train_cell", {})
    try:
        return int(train_resources.get("gpu", 0) or 0)
    except (TypeError, ValueError):
        return 0


def workplace():
    """Where this plan runs (fedbench.planning.preflight); ``None`` inside a job, which the plan already checked."""
    if not workflow.is_main_process:
        return None
    return Workplace(Path(workflow.basedir), Path.cwd(), train_gpus(), command_targets() == {"claims"})


def command_targets():
    """The targets the ``snakemake`` command line names (empty: the default target).  Snakemake sets its DAG
    settings, targets included, only after reading this file, so the command line is read here with
    Snakemake's own argument parser; ``None`` where the workflow was not started by the command."""
    if Path(sys.argv[0]).name != "snakemake":
        return None
    from snakemake.cli import get_argument_parser
    try:
        return set(get_argument_parser().parse_known_args(sys.argv[1:])[0].targets)
    except SystemExit:  # a command line Snakemake itself will refuse, with its own message
        return None


# ---- validation ---------------------------------------------------------------------
# A bad config stops here, before any job, with one line naming the entry, the problem and the
# valid choices: repeated keys, then structure and types (schema), then names, parameter values,
# grids and published links, then what the jobs would hit (where results go, whether the data is
# there, whether the run can end).  A schema violation's full report goes to CONFIG_ERROR_LOG.
# The plan's estimate goes to stderr, one line.
CONFIG_ERROR_LOG = Path(".snakemake/log/fedbench_config_error.log")
try:
    PLAN_ESTIMATE = validate_config(
        config,
        workflow.configfiles,
        schema=Path(workflow.basedir) / "workflow/schemas/config.schema.yaml",
        published_csv=Path(workflow.basedir) / "config/published_results.csv",
        workplace=workplace(),
    )
except ConfigFileError as error:
    CONFIG_ERROR_LOG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG_ERROR_LOG.write_text(f"{error.detail}\n")
    raise WorkflowError(f"Invalid fedbench config: {error} (full report: {CONFIG_ERROR_LOG})")
except ValueError as error:
    raise WorkflowError(f"Invalid fedbench config: {error}")
validate(config, "../schemas/config.schema.yaml")  # fills in the schema's defaults (path: relative to this file)
if PLAN_ESTIMATE is not None:
    print(PLAN_ESTIMATE.line(), file=sys.stderr)


# ---- constants (of the validated config) --------------------------------------------


RESULTS = config["results"]
CELLS = expand_cells(config)
TRIALS = f"{RESULTS}/tuning/trials"  # every tuning trial's run directory is under here
PUBLISHED_CSV = os.path.join(workflow.basedir, "config", "published_results.csv")  # the papers' numbers


# ---- names --------------------------------------------------------------------------


def name_choices(section):
    """Regex matching exactly the names declared in a config section (for wildcard_constraints)."""
    names = sorted(config.get(section, {}))
    return "|".join(re.escape(name) for name in names) or "(?!)"  # (?!) matches nothing


# ---- output paths -------------------------------------------------------------------


def run_file(cell, name):
    """A file of one cell's run directory, e.g. ``run_file(cell, "metrics.json")``."""
    return f"{cell.run_dir(RESULTS)}/{name}"


def all_partitions(ext):
    """Every partition file (``npz``, ``json`` or ``png`` heatmap): those the cells need and the ``partition_grid``'s."""
    return [f"{RESULTS}/partitions/{d}/{p}/seed{s}.{ext}" for d, p, s in expand_partitions(config)]


def all_runs(name, experiment=None):
    """``name`` (metrics.json, history.csv, clients.csv) of every cell, or of one experiment's cells."""
    return [run_file(cell, name) for cell in CELLS if experiment in (None, cell.experiment)]


def runs_left_out(name):
    """``name`` of the finished runs (on disk now) of the experiments ``only_experiments`` leaves
    out, so that the results table merges them with this invocation's instead of dropping them."""
    if config.get("only_experiments") is None:
        return []
    current = set(CELLS)
    every_cell = expand_cells({key: value for key, value in config.items() if key != "only_experiments"})
    return [run_file(c, name) for c in every_cell if c not in current and os.path.exists(run_file(c, name))]


def all_encoders(suffix):
    """Every declared encoder's file: ``suffix`` ``.pt``, ``_loss.csv`` or ``_loss.png``."""
    return [f"{RESULTS}/encoders/{name}{suffix}" for name in config.get("encoders", {})]


def encoder_inputs(wildcards):
    """The pretrained encoder a cell's algorithm reads (FLT's ``encoder`` key), else nothing."""
    name = config["algorithms"][wildcards.algorithm].get("encoder")
    return [f"{RESULTS}/encoders/{name}.pt"] if name else []


def curve_figures():
    """One accuracy-curve figure per experiment that has cells."""
    return [f"{RESULTS}/figures/curves_{experiment}.png" for experiment in sorted({cell.experiment for cell in CELLS})]


def communication_figures():
    """Per experiment that has cells: accuracy against megabytes sent, and the table of rounds and megabytes to target."""
    experiments = sorted({cell.experiment for cell in CELLS})
    return [f"{RESULTS}/figures/bytes_{e}.png" for e in experiments] + [f"{RESULTS}/tables/to_target_{e}.{x}"
                                                                       for e in experiments for x in ("csv", "md")]


# The clustering figures (figures.smk, clustering_figure), by the kind drawn; for each, the file
# name's suffix (that rule's ``figure`` wildcard), the report subcategory, the methods that have one.
CLUSTERING_FIGURES = {
    "adjacency": {"suffix": "", "subcategory": "Client relatedness", "methods": ("flt", "pca_km_hc")},
    "umap": {"suffix": "_umap", "subcategory": "Client relatedness", "methods": ("flt",)},
    "assignments": {"suffix": "_assignments", "subcategory": "Cluster assignments", "methods": ("fesem", "ifca")},
}


def clustering_figures(kind):
    """Adjacency (``kind="adjacency"``, FLT and PCA+kM+HC), UMAP (``"umap"``, FLT) or cluster-assignment
    (``"assignments"``, FeSEM and IFCA) figures of the first seed's runs of those algorithms."""
    methods = CLUSTERING_FIGURES[kind]["methods"]
    suffix = CLUSTERING_FIGURES[kind]["suffix"]
    first_seed = min(int(s) for s in config["seeds"])
    return [
        f"{RESULTS}/figures/relatedness/{c.experiment}/{c.dataset}_{c.partition}_{c.model}_{c.algorithm}_seed{c.seed}{suffix}.png"
        for c in CELLS
        if c.seed == first_seed and config["algorithms"][c.algorithm]["method"] in methods
    ]


def clustering_figure_choices():
    """Regex matching exactly the clustering figures' file-name suffixes (the ``figure`` wildcard; one is empty)."""
    return "|".join(re.escape(figure["suffix"]) for figure in CLUSTERING_FIGURES.values())


def clustering_kind(wildcards):
    """The kind a clustering figure draws (``adjacency``, ``umap``, ``assignments``), from its ``figure`` wildcard."""
    return next(kind for kind, figure in CLUSTERING_FIGURES.items() if figure["suffix"] == wildcards.figure)


def clustering_subcategory(wildcards):
    """Report subcategory of a clustering figure: client relatedness (graph, UMAP) or cluster assignments."""
    return CLUSTERING_FIGURES[clustering_kind(wildcards)]["subcategory"]


def femam_figures():
    """FeMAM's structure figures (levels x clients beside the ground truth; levels vs rounds) of the
    first seed's runs of every ``femam`` algorithm entry."""
    first_seed = min(int(s) for s in config["seeds"])
    return [
        f"{RESULTS}/figures/femam/{c.experiment}/{c.dataset}_{c.partition}_{c.model}_{c.algorithm}_seed{c.seed}_{kind}.png"
        for c in CELLS
        if c.seed == first_seed and config["algorithms"][c.algorithm]["method"] == "femam"
        for kind in ("structure", "levels")
    ]


def flt_cells(experiment=None, dataset=None, partition=None, model=None):
    """The cells of ``flt`` algorithm entries, optionally of one experiment block."""
    wanted = (experiment, dataset, partition, model)
    return [
        c for c in CELLS
        if config["algorithms"][c.algorithm]["method"] == "flt"
        and all(w is None or w == v for w, v in zip(wanted, (c.experiment, c.dataset, c.partition, c.model)))
    ]


def gamma_sweep_figures():
    """One gamma-sweep figure per (experiment, dataset, partition, model) that has FLT cells."""
    blocks = sorted({(c.experiment, c.dataset, c.partition, c.model) for c in flt_cells()})
    return [f"{RESULTS}/figures/gamma/{e}/{d}_{p}_{m}.png" for e, d, p, m in blocks]


def gamma_sweep_inputs(wildcards, kind):
    """The block's FLT runs (``metrics``) or the partitions of their seeds (``partitions``)."""
    cells = flt_cells(wildcards.experiment, wildcards.dataset, wildcards.partition, wildcards.model)
    if kind == "metrics":
        return [run_file(c, "metrics.json") for c in cells]
    return sorted({f"{c.partition_stem(RESULTS)}.json" for c in cells})


def table_files():
    """The results table (CSV and Markdown), when there are cells to tabulate."""
    return [f"{RESULTS}/tables/results.{ext}" for ext in ("csv", "md")] if CELLS else []


def scorecard_files():
    """The paper-vs-reproduction scorecard and coverage, when an experiment with cells links to published numbers."""
    linked = {cell.experiment for cell in CELLS if config["experiments"][cell.experiment].get("published")}
    files = [f"{RESULTS}/tables/{name}" for name in ("scorecard.csv", "scorecard.md", "coverage.csv", "coverage.md", "coverage.rst")]
    return files if linked else []


# ---- the report by paper: one category per paper (fedbench.results.papers) ----------


def experiment_category(wildcards):
    """Report category of an output of one experiment: its paper's."""
    return category(experiment_paper(config, wildcards.experiment))


def partition_category(wildcards):
    """Report category of a partition heatmap: the paper whose experiments train on it (several or none: shared)."""
    pair = (wildcards.dataset, wildcards.partition)
    return shared_category(experiment_paper(config, c.experiment) for c in CELLS if (c.dataset, c.partition) == pair)


def encoder_category(wildcards):
    """Report category of an encoder's loss curve: the paper whose experiments' algorithms read it."""
    return shared_category(
        experiment_paper(config, c.experiment) for c in CELLS
        if config["algorithms"][c.algorithm].get("encoder") == wildcards.encoder
    )


def cell_papers():
    """The papers of the experiments that have cells."""
    return config_papers(config, {c.experiment for c in CELLS})


def linked_papers():
    """The papers with an experiment that has cells and links to published numbers (a scorecard)."""
    linked = {c.experiment for c in CELLS if config["experiments"][c.experiment].get("published")}
    return config_papers(config, linked)


def paper_table_files():
    """Per paper: its results table and, where its experiments link to published numbers, its scorecard."""
    files = [f"{RESULTS}/tables/{p}/results.{ext}" for p in cell_papers() for ext in ("csv", "md")]
    return files + [f"{RESULTS}/tables/{p}/scorecard.{ext}" for p in linked_papers() for ext in ("csv", "md")]


# ---- per-job settings (the params rerun trigger compares these) ---------------------


def partition_settings(wildcards):
    """The config entries a partition is built from; editing them re-partitions (and retrains)."""
    return {
        "dataset": config["datasets"][wildcards.dataset],
        "partition": config["partitions"][wildcards.partition],
    }


def cell_settings(wildcards, cfg=None):
    """The config entries one cell is trained with; editing them retrains only the cells that use them."""
    cfg = config if cfg is None else cfg
    experiment = cfg["experiments"][wildcards.experiment]
    return {
        "dataset": cfg["datasets"][wildcards.dataset],
        "partition": cfg["partitions"][wildcards.partition],
        "model": cfg["models"][wildcards.model],
        "algorithm": cfg["algorithms"][wildcards.algorithm],
        "protocol": experiment.get("protocol"),
        "training": identity_training(experiment.get("training", {})),
    }


def trial_cell_settings(wildcards):
    """A tuning trial's settings: its cell's at the trial's setting (editing the tune block reruns what it changes)."""
    return cell_settings(wildcards, trial_config(config, wildcards.experiment, wildcards.algorithm, int(wildcards.trial)))


def estimate_device():
    """``cpu`` or ``cuda``: the config's ``device``; for ``auto``, cuda where training jobs request a
    GPU (the SLURM profile's ``gpu: 1``) or this machine has one."""
    return plan_device(config["device"], train_gpus())


@functools.lru_cache(maxsize=None)
def _train_cost(experiment, dataset, partition, model, algorithm, summary_path):
    spec = resolve_cell(config, Cell(experiment, dataset, partition, model, algorithm, 0))
    with open(summary_path) as f:
        summary = json.load(f)
    if "input_shape" in summary:  # else a partition written before summaries carried the shape
        shape = summary_shape(summary)
    else:
        shape = estimated_shape(spec["dataset"], spec["partition"])
    device = estimate_device()
    try:
        check_one_client_fits(spec["model"], shape, spec["training"], device)
    except MemoryBudgetError as error:
        raise WorkflowError(f"experiments.{experiment}, {dataset}/{partition}/{model}: {error}") from None
    return cell_cost(spec, shape, device)


def train_cost(wildcards, input):
    """The cost model's estimate for a training job (fedbench.cost.model): its work from the cell and its
    partition's summary (ready before the job runs), its time from the measured throughputs of
    the model's family on the config's device (config/throughputs.yaml), its memory
    (fedbench.cost.memory).  A budget too small for one client stops the workflow here, before the job."""
    w = wildcards
    return _train_cost(w.experiment, w.dataset, w.partition, w.model, w.algorithm, input.summary)


def train_mem_mb(wildcards, input):
    """``mem_mb`` of a training job: process, working budget, every client's model state, the dataset."""
    return train_cost(wildcards, input).mem_mb


def train_runtime(wildcards, input, attempt):
    """``runtime`` (minutes) of a training job: the safety factor x the estimate x the attempt."""
    return runtime_minutes(train_cost(wildcards, input), attempt)


def encoder_settings(wildcards):
    """The config entries an encoder is pretrained from; editing them re-pretrains (and retrains)."""
    entry = config["encoders"][wildcards.encoder]
    return {"encoder": entry, "dataset": config["datasets"][entry["dataset"]]}


# ---- library sources --------------------------------------------------------------
# Partitions, encoders and training runs do NOT depend on the library's files nor on their rule
# scripts: each records the provenance of its code and script (fedbench.run.provenance), finished
# results stay when code changes, and
# `python -m fedbench.planning.stale` / `make rerun-stale` list and rerun the out-of-date ones.
# Tables and figures are cheap and are remade when their code changes.


def library_sources(*patterns):
    """fedbench source files matching ``patterns`` (relative to the repository root), sorted."""
    root = workflow.basedir
    return sorted({path for pattern in patterns for path in glob.glob(os.path.join(root, pattern), recursive=True)})


STAGE_SCRIPTS = ("partition.py", "pretrain_encoder.py", "train.py")  # provenance tracks these


def results_sources():
    """Tables and figures: their library code and their rule scripts (an input each, so an edit
    redraws them: the workflow profile leaves Snakemake's ``code`` trigger off)."""
    scripts = [path for path in library_sources("workflow/scripts/*.py") if os.path.basename(path) not in STAGE_SCRIPTS]
    return library_sources("fedbench/results/**/*.py") + scripts


# ---- tuning (workflow/rules/tune.smk, fedbench.tuning.trials) ----------------------------------------


def tuned_blocks(experiment=None):
    """(experiment, dataset, partition, model, algorithm) of every cell of the tuned experiments (or one)."""
    tuned = set(tuned_experiments(config))
    return sorted({(c.experiment, c.dataset, c.partition, c.model, c.algorithm) for c in CELLS
                   if c.experiment in tuned and experiment in (None, c.experiment)})


def trial_files(wildcards, name):
    """``name`` of every trial of one algorithm entry in one cell: the block's trials x tuning seeds."""
    w = wildcards
    block = tune_block(config, w.experiment)
    return [f"{TRIALS}/{w.experiment}/{w.dataset}/{w.partition}/{w.model}/{w.algorithm}/trial{t}/seed{s}/{name}"
            for t in range(block["trials"]) for s in block["seeds"]]


def tuning_files(experiment, name):
    """``chosen.json`` or ``trials.csv`` of every algorithm entry and cell of a tuned experiment."""
    return [f"{RESULTS}/tuning/{e}/{d}/{p}/{m}/{a}/{name}" for e, d, p, m, a in tuned_blocks(experiment)]


def tuned_runs(name):
    """``name`` of every tuned cell's final run at the config's seeds."""
    return [f"{RESULTS}/tuned/runs/{e}/{d}/{p}/{m}/{a}/seed{s}/{name}" for e, d, p, m, a in tuned_blocks()
            for s in config["seeds"]]


def tuning_figures():
    """One sensitivity figure per tuned experiment that has cells."""
    return [f"{RESULTS}/figures/tuning_{e}.png" for e in sorted({b[0] for b in tuned_blocks()})]


# ---- claims (rule paper_claims and checkpoint claims_look, workflow/rules/claims.smk) ----------------

SETTING_ROOTS = {"paper": f"{RESULTS}/runs", "tuned": f"{RESULTS}/tuned/runs"}


def claimed_experiments(paper=None):
    """The experiments with cells that a claim (of ``paper``, or any) is tested on."""
    with_cells = {c.experiment for c in CELLS}
    return {config["claims"][name]["experiment"] for name in evaluated_claims(config, paper)} & with_cells


def claims_files():
    """Per paper with a claim on an experiment that has cells: its claims table (CSV, Markdown)."""
    papers = config_papers(config, claimed_experiments())
    return [f"{RESULTS}/tables/{p}/claims.{ext}" for p in papers for ext in ("csv", "md")]


def claims_tuning_blocks():
    """(experiment, dataset, partition, model, algorithm) of every algorithm entry a tuned claim reads:
    the trials the ``claims`` target runs anyway, drawn per experiment as the claims' sensitivity figure."""
    with_cells = claimed_experiments()
    blocks = set()
    for name in evaluated_claims(config, None, "tuned"):
        claim = config["claims"][name]
        if claim["experiment"] in with_cells:
            blocks.update((claim["experiment"], d, p, m, a) for d, p, m in claim_cells(config, name)
                          for a in claim_algorithms(claim))
    return sorted(blocks)


def claims_tuning_figures():
    """One sensitivity figure per tuned experiment a claim reads: the compared methods' trials only."""
    return [f"{RESULTS}/figures/claims/tuning_{e}.png" for e in sorted({b[0] for b in claims_tuning_blocks()})]


def claim_settings(paper):
    """``paper`` and, where a claim of the paper is on a tuned experiment, ``tuned``."""
    with_cells = claimed_experiments(paper)
    return [s for s in ("paper", "tuned") if any(config["claims"][n]["experiment"] in with_cells
                                                 for n in evaluated_claims(config, paper, s))]


def look_runs(paper, setting, look, name):
    """``name`` of every run look ``look`` of ``paper``'s claims at ``setting`` reads: the claims still
    open after the previous look (every claim at look 0), at the design's first seeds up to this look's count."""
    with_cells = claimed_experiments(paper)
    if look == 0:
        names = [n for n in evaluated_claims(config, paper, setting) if config["claims"][n]["experiment"] in with_cells]
    else:
        previous = checkpoints.claims_look.get(paper=paper, setting=setting, look=str(look - 1)).output[0]
        with open(previous) as f:
            names = json.load(f)["open"]
    seeds = design_seeds(config)[: claims_design(config)["looks"][look]]
    files = set()
    for claim_name in names:
        claim = config["claims"][claim_name]
        for d, p, m in claim_cells(config, claim_name):
            for a in claim_algorithms(claim):
                files.update(f"{SETTING_ROOTS[setting]}/{claim['experiment']}/{d}/{p}/{m}/{a}/seed{s}/{name}" for s in seeds)
    return sorted(files)


def final_looks(paper, setting):
    """The look files of ``paper``'s claims at ``setting``, from the first until the one that closes them."""
    looks, look = [], 0
    while True:
        looks.append(checkpoints.claims_look.get(paper=paper, setting=setting, look=str(look)).output[0])
        with open(looks[-1]) as f:
            if json.load(f)["done"]:
                return looks
        look += 1


def claims_runs(wildcards, name, setting="paper"):
    """``name`` (metrics.json, history.csv) of every run the looks of the paper's claims at ``setting`` read."""
    if setting not in claim_settings(wildcards.paper):
        return []
    looks = final_looks(wildcards.paper, setting)
    return sorted({f for look in range(len(looks)) for f in look_runs(wildcards.paper, setting, look, name)})

"""The workflow's questions about a validated config, answered in one place: which files each target
needs, what each rule's job is given (its settings, its resources, the figures its algorithm declares),
and which runs each look of the claims reads.  ``workflow/rules/common.smk`` builds one
:class:`WorkflowPlan` and the rule files call its methods; the jobs themselves come from
:func:`fedbench.planning.jobs.planned_runs`, their paths from :mod:`fedbench.config.layout`.

Which figures a run gets is the algorithm's declaration at registration (``ALGORITHMS.register(...,
figures=("adjacency", ...))``, :data:`FIGURES`): the workflow names no method."""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import re
from pathlib import Path
from typing import Callable

from snakemake.exceptions import WorkflowError

from fedbench.config import layout
from fedbench.config.cells import Cell, expand_cells, expand_partitions, identity_training, planned_encoders, resolve_cell
from fedbench.cost.memory import check_one_client_fits
from fedbench.cost import cell_cost, choose_device, estimated_shape, runtime_minutes, summary_shape
from fedbench.engine.memory import MemoryBudgetError
from fedbench.planning.jobs import Run, block_trials, look_runs, planned_runs, tuned_blocks
from fedbench.planning.preflight import plan_device
from fedbench.registry.algorithms import ALGORITHMS
from fedbench.results.claims.spec import claim_algorithms, claim_cells, evaluated_claims
from fedbench.results.papers import (
    GUIDES, PAPERS, category, config_papers, experiment_paper, paper_experiments, shared_category,
)
from fedbench.run.job import cell_job
from fedbench.run.reuse import same_numbers
from fedbench.tuning.trials import apply_setting, trial_config

# The figures an algorithm may declare (``figures=`` at registration), drawn from the first seed's runs:
# for each, the rule that draws it, the file name's suffix (that rule's ``figure`` wildcard) and the report
# subcategory.  ``gamma_sweep`` is drawn once per block of cells (all seeds), by its own rule.
FIGURES = {
    "adjacency": {"rule": "clustering_figure", "directory": "relatedness", "suffix": "", "subcategory": "Client relatedness"},
    "umap": {"rule": "clustering_figure", "directory": "relatedness", "suffix": "_umap", "subcategory": "Client relatedness"},
    "assignments": {"rule": "clustering_figure", "directory": "relatedness", "suffix": "_assignments",
                    "subcategory": "Cluster assignments"},
    "femam_structure": {"rule": "femam_structure_figure", "directory": "structure", "suffix": "",
                        "subcategory": "FeMAM structure"},
    "gamma_sweep": {"rule": "gamma_sweep_figure", "directory": "gamma", "suffix": "", "subcategory": "γ sweep"},
}
RUN_FIGURE = "{experiment}/{dataset}_{partition}_{model}_{algorithm}_seed{seed}"  # a run's figure, under its directory
CLUSTERING_FIGURES = {kind: figure for kind, figure in FIGURES.items() if figure["rule"] == "clustering_figure"}
# Partitions, encoders and training runs record the provenance of their code and scripts
# (fedbench.run.provenance): they are not remade when code changes; tables and figures list their code.
# Training jobs' priorities (``priority:``): paper-setting runs ahead of tuned ones (a tuned run whose
# tuning chose the configured setting copies the paper-setting run); a run an open claim waits for ahead of
# every run no claim waits for (WorkflowPlan.run_priority).
RUN_PRIORITY = {"train": 1, "trial": 0, "tuned": 0}
CLAIM_PRIORITY = 10
STAGE_SCRIPTS = ("partition.py", "pretrain_encoder.py", "train.py")


class WorkflowPlan:
    """The validated ``config``'s files, settings and resources, for the rule files.  ``basedir``: the
    repository (the Snakefile's folder); ``train_gpus``: the GPUs a training job requests; ``look_file``:
    the path of the claims' look ``k`` of a paper and setting once it exists (Snakemake's checkpoint);
    ``left_out``: the cells ``missing_data: skip`` left out, one row each."""

    def __init__(self, config: dict, basedir: str | Path, train_gpus: int = 0,
                 look_file: Callable[[str, str, int], str] | None = None, left_out: list[dict] | None = None):
        self.config = config
        self.left_out = left_out or []  # missing_data: skip's cells left out (fedbench.planning.missing_data)
        self.results = config["results"]
        self.basedir = str(basedir)
        self.train_gpus = train_gpus
        self.look_file = look_file
        self.cells = expand_cells(config)
        self.runs = [run for run in planned_runs(config) if not run.added]  # the looks add theirs as they go
        self.first_seed = min(int(s) for s in config["seeds"])

    # ---- names and files ------------------------------------------------------------------------

    def name_choices(self, section: str) -> str:
        """Regex matching exactly the names declared in a config section (for wildcard_constraints)."""
        return "|".join(re.escape(name) for name in sorted(self.config.get(section, {}))) or "(?!)"

    def partitions(self, ext: str) -> list[str]:
        """Every partition file (``npz``, ``json`` or ``png`` heatmap): those the cells need and the ``partition_grid``'s."""
        return [f"{layout.partition_stem(self.results, d, p, s)}.{ext}" for d, p, s in expand_partitions(self.config)]

    def left_out_files(self) -> list[str]:
        """``tables/left_out.csv`` and ``.md`` where the config skips missing data (``missing_data: skip``)."""
        if self.config.get("missing_data", "refuse") != "skip":
            return []
        return [f"{self.results}/tables/left_out.{ext}" for ext in ("csv", "md")]

    def encoders(self, suffix: str) -> list[str]:
        """Every planned encoder's file (:func:`fedbench.config.cells.planned_encoders`): ``suffix`` ``.pt``,
        ``_loss.csv`` or ``_loss.png``."""
        return [f"{self.results}/encoders/{name}{suffix}" for name in planned_encoders(self.config)]

    def encoder_inputs(self, wildcards) -> list[str]:
        """The pretrained encoder a cell's algorithm reads (FLT's ``encoder`` key), else nothing."""
        name = self.config["algorithms"][wildcards.algorithm].get("encoder")
        return [f"{self.results}/encoders/{name}.pt"] if name else []

    def run_outputs(self, kind: str) -> dict[str, str]:
        """A training rule's named outputs (metrics.json, history.csv, clients.csv) as patterns."""
        pattern = layout.run_pattern(self.results, kind)
        return {"metrics": f"{pattern}/metrics.json", "history": f"{pattern}/history.csv", "clients": f"{pattern}/clients.csv"}

    def run_log(self, kind: str) -> str:
        return layout.log_path(self.results, kind, **layout.wildcards(kind))

    def run_benchmark(self, kind: str) -> str:
        return layout.benchmark_path(self.results, kind, **layout.wildcards(kind))

    def _files(self, runs, name: str) -> list[str]:
        return [run.file(self.results, name) for run in runs]

    def all_runs(self, name: str, experiment: str | None = None) -> list[str]:
        """``name`` (metrics.json, history.csv, clients.csv) of every cell's run, or of one experiment's."""
        return self._files((r for r in self.runs if r.kind == "train" and experiment in (None, r.cell.experiment)), name)

    def runs_left_out(self, name: str) -> list[str]:
        """``name`` of the finished runs (on disk now) of the experiments ``only_experiments`` leaves
        out, so that the results table merges them with this invocation's instead of dropping them."""
        if self.config.get("only_experiments") is None:
            return []
        current = set(self.cells)
        every_cell = expand_cells({k: v for k, v in self.config.items() if k != "only_experiments"})
        files = (Run("train", c).file(self.results, name) for c in every_cell if c not in current)
        return [f for f in files if os.path.exists(f)]

    def tuned_runs(self, name: str) -> list[str]:
        """``name`` of every tuned cell's final run at the config's seeds."""
        return self._files((r for r in self.runs if r.kind == "tuned"), name)

    def trial_files(self, wildcards, name: str) -> list[str]:
        """``name`` of every trial of one algorithm entry in one cell: the block's trials x tuning seeds."""
        w = wildcards
        return self._files(block_trials(self.config, (w.experiment, w.dataset, w.partition, w.model, w.algorithm)), name)

    def tuning_files(self, experiment: str | None, name: str) -> list[str]:
        """``chosen.json`` or ``trials.csv`` of every algorithm entry and cell of a tuned experiment (or all)."""
        return [f"{self.results}/tuning/{e}/{d}/{p}/{m}/{a}/{name}" for e, d, p, m, a in tuned_blocks(self.config, experiment)]

    def tuning_figures(self) -> list[str]:
        """One sensitivity figure per tuned experiment that has cells."""
        return [f"{self.results}/figures/tuning_{e}.png" for e in sorted({b[0] for b in tuned_blocks(self.config)})]

    # ---- figures and tables -----------------------------------------------------------------------

    def experiments(self) -> list[str]:
        return sorted({cell.experiment for cell in self.cells})

    def curve_figures(self) -> list[str]:
        """One accuracy-curve figure per experiment that has cells."""
        return [f"{self.results}/figures/curves_{e}.png" for e in self.experiments()]

    def communication_figures(self) -> list[str]:
        """Per experiment: accuracy against megabytes sent, and the table of rounds and megabytes to target."""
        experiments = self.experiments()
        return ([f"{self.results}/figures/bytes_{e}.png" for e in experiments]
                + [f"{self.results}/tables/to_target_{e}.{x}" for e in experiments for x in ("csv", "md")])

    def declares(self, cell: Cell, figure: str) -> bool:
        """Whether the cell's algorithm declares ``figure`` (:data:`FIGURES`) at its registration."""
        method = self.config["algorithms"][cell.algorithm]["method"]
        return figure in (ALGORITHMS.extra(method, "figures") or ())

    def figure_pattern(self, figure: str, name: str = "{figure}", ext: str = "png") -> str:
        """A run's ``figure`` file as a rule's pattern (``name``: the suffix after the run's name; the default is
        the ``figure`` wildcard); ``ext`` ``log`` under the logs."""
        root = f"{self.results}/logs/figures" if ext == "log" else f"{self.results}/figures"
        return f"{root}/{FIGURES[figure]['directory']}/{RUN_FIGURE}{name}.{ext}"

    def _first_seed_figures(self, figure: str, suffixes) -> list[str]:
        directory = FIGURES[figure]["directory"]
        return [f"{self.results}/figures/{directory}/{RUN_FIGURE.format(**dataclasses.asdict(c))}{suffix}.png"
                for c in self.cells if c.seed == self.first_seed and self.declares(c, figure) for suffix in suffixes]

    def clustering_figures(self, kind: str) -> list[str]:
        """The ``kind`` (adjacency, umap, assignments) figures of the first seed's runs of the algorithms declaring it."""
        return self._first_seed_figures(kind, [CLUSTERING_FIGURES[kind]["suffix"]])

    def clustering_figure_choices(self) -> str:
        """Regex matching exactly the clustering figures' file-name suffixes (the ``figure`` wildcard; one is empty)."""
        return "|".join(re.escape(figure["suffix"]) for figure in CLUSTERING_FIGURES.values())

    def clustering_kind(self, wildcards) -> str:
        """The kind a clustering figure draws, from its ``figure`` wildcard."""
        return next(kind for kind, figure in CLUSTERING_FIGURES.items() if figure["suffix"] == wildcards.figure)

    def clustering_subcategory(self, wildcards) -> str:
        return CLUSTERING_FIGURES[self.clustering_kind(wildcards)]["subcategory"]

    def femam_figures(self) -> list[str]:
        """The structure figures (levels x clients beside the ground truth; levels vs rounds) of the first seed's
        runs of the algorithms declaring ``femam_structure``."""
        return self._first_seed_figures("femam_structure", ["_structure", "_levels"])

    def gamma_sweep_cells(self, experiment=None, dataset=None, partition=None, model=None) -> list[Cell]:
        """The cells of the algorithms declaring ``gamma_sweep``, optionally of one block."""
        wanted = (experiment, dataset, partition, model)
        return [c for c in self.cells if self.declares(c, "gamma_sweep")
                and all(w is None or w == v for w, v in zip(wanted, (c.experiment, c.dataset, c.partition, c.model)))]

    def gamma_sweep_figures(self) -> list[str]:
        """One gamma-sweep figure per (experiment, dataset, partition, model) that has such cells."""
        blocks = sorted({(c.experiment, c.dataset, c.partition, c.model) for c in self.gamma_sweep_cells()})
        return [f"{self.results}/figures/gamma/{e}/{d}_{p}_{m}.png" for e, d, p, m in blocks]

    def _gamma_block(self, w) -> list[Cell]:
        return self.gamma_sweep_cells(w.experiment, w.dataset, w.partition, w.model)

    def gamma_sweep_runs(self, wildcards) -> list[str]:
        return self._files((Run("train", c) for c in self._gamma_block(wildcards)), "metrics.json")

    def gamma_sweep_partitions(self, wildcards) -> list[str]:
        return sorted({f"{c.partition_stem(self.results)}.json" for c in self._gamma_block(wildcards)})

    def gamma_sweep_entries(self, wildcards) -> dict:
        return {c.algorithm: self.config["algorithms"][c.algorithm] for c in self._gamma_block(wildcards)}

    def table_files(self) -> list[str]:
        """The results table (CSV and Markdown), when there are cells to tabulate."""
        return [f"{self.results}/tables/results.{ext}" for ext in ("csv", "md")] if self.cells else []

    def _linked(self) -> set[str]:
        return {c.experiment for c in self.cells if self.config["experiments"][c.experiment].get("published")}

    def scorecard_files(self) -> list[str]:
        """The paper-vs-reproduction scorecard and coverage, when an experiment with cells links to published numbers."""
        names = ("scorecard.csv", "scorecard.md", "coverage.csv", "coverage.md", "coverage.rst")
        return [f"{self.results}/tables/{name}" for name in names] if self._linked() else []

    def paper_table_files(self) -> list[str]:
        """Per paper: its results table and, where its experiments link to published numbers, its scorecard."""
        files = [f"{self.results}/tables/{p}/results.{x}" for p in config_papers(self.config, set(self.experiments()))
                 for x in ("csv", "md")]
        return files + [f"{self.results}/tables/{p}/scorecard.{x}" for p in config_papers(self.config, self._linked())
                        for x in ("csv", "md")]

    # ---- the report: one category per paper -------------------------------------------------------

    def paper_choices(self) -> str:
        """Regex matching exactly the papers' names (the ``paper`` wildcard)."""
        return "|".join(PAPERS)

    def paper_category(self, wildcards) -> str:
        return category(wildcards.paper)

    def paper_experiments(self, wildcards) -> list[str]:
        return paper_experiments(self.config, wildcards.paper)

    def paper_guide(self, wildcards) -> str:
        """What to look for in a paper's tables (their report captions)."""
        return GUIDES[wildcards.paper]

    def experiment_category(self, wildcards) -> str:
        return category(experiment_paper(self.config, wildcards.experiment))

    def partition_category(self, wildcards) -> str:
        """A partition heatmap's category: the paper whose experiments train on it (several or none: shared)."""
        pair = (wildcards.dataset, wildcards.partition)
        return shared_category(experiment_paper(self.config, c.experiment) for c in self.cells if (c.dataset, c.partition) == pair)

    def encoder_category(self, wildcards) -> str:
        """An encoder's loss curve's category: the paper whose experiments' algorithms read it."""
        return shared_category(experiment_paper(self.config, c.experiment) for c in self.cells
                               if self.config["algorithms"][c.algorithm].get("encoder") == wildcards.encoder)

    # ---- what each job is given -------------------------------------------------------------------

    def partition_settings(self, wildcards) -> dict:
        """The config entries a partition is built from; editing them re-partitions (and retrains)."""
        return {"dataset": self.config["datasets"][wildcards.dataset], "partition": self.config["partitions"][wildcards.partition]}

    def encoder_settings(self, wildcards) -> dict:
        """The config entries an encoder is pretrained from; editing them re-pretrains (and retrains)."""
        entry = self.config["encoders"][wildcards.encoder]
        return {"encoder": entry, "dataset": self.config["datasets"][entry["dataset"]]}

    def cell_settings(self, wildcards, config: dict | None = None) -> dict:
        """The config entries one cell is trained with (the params rerun trigger compares them): editing them
        retrains only the cells that use them."""
        cfg = self.config if config is None else config
        experiment = cfg["experiments"][wildcards.experiment]
        return {
            "dataset": cfg["datasets"][wildcards.dataset], "partition": cfg["partitions"][wildcards.partition],
            "model": cfg["models"][wildcards.model], "algorithm": cfg["algorithms"][wildcards.algorithm],
            "protocol": experiment.get("protocol"), "training": identity_training(experiment.get("training", {})),
        }

    def trial_settings(self, wildcards) -> dict:
        """A tuning trial's settings: its cell's at the trial's setting."""
        return self.cell_settings(wildcards, trial_config(self.config, wildcards.experiment, wildcards.algorithm,
                                                          int(wildcards.trial)))

    def device(self) -> str:
        """``cpu`` or ``cuda`` the estimates are for: the config's ``device``; for ``auto``, cuda where
        training jobs request a GPU (the SLURM profile's ``gpu: 1``) or this machine has one."""
        return plan_device(self.config["device"], self.train_gpus)

    @functools.lru_cache(maxsize=None)
    def _train_cost(self, experiment, dataset, partition, model, algorithm, summary_path):
        spec = resolve_cell(self.config, Cell(experiment, dataset, partition, model, algorithm, 0))
        with open(summary_path) as f:
            summary = json.load(f)
        shape = summary_shape(summary) if "input_shape" in summary else estimated_shape(spec["dataset"], spec["partition"])
        try:
            check_one_client_fits(spec["model"], shape, spec["training"], self.device())
        except MemoryBudgetError as error:
            raise WorkflowError(f"experiments.{experiment}, {dataset}/{partition}/{model}: {error}") from None
        return cell_cost(spec, shape, self.device())

    def train_cost(self, wildcards, input):
        """The cost model's estimate for a training job (fedbench.cost): its work from the cell and its partition's
        summary (ready before the job runs), its time from the measured throughputs of the model's family on the
        plan's device, its memory.  A budget too small for one client stops the workflow here, before the job."""
        w = wildcards
        return self._train_cost(w.experiment, w.dataset, w.partition, w.model, w.algorithm, input.summary)

    def train_mem_mb(self, wildcards, input) -> int:
        """``mem_mb`` of a training job: process, working budget, every client's model state, the dataset."""
        return self.train_cost(wildcards, input).mem_mb

    def train_runtime(self, wildcards, input, attempt) -> int:
        """``runtime`` (minutes) of a training job: the safety factor x the estimate x the attempt."""
        return runtime_minutes(self.train_cost(wildcards, input), attempt)

    def _run_config(self, kind: str, wildcards, input) -> dict:
        """The config a ``kind`` run trains under: a trial's setting, or the one tuning chose (``chosen.json``,
        read once it exists: Snakemake evaluates the job's params again when its inputs are there)."""
        w = wildcards
        if kind == "trial":
            return trial_config(self.config, w.experiment, w.algorithm, int(w.trial))
        if kind == "tuned":
            with open(input.chosen) as f:
                return apply_setting(self.config, w.experiment, w.algorithm, json.load(f)["setting"])
        return self.config

    def training_job(self, kind: str, wildcards, input) -> dict:
        """The job a training rule of ``kind`` (train, trial, tuned) gives its script (:class:`fedbench.run.job.CellJob`,
        as params): the cell resolved under its trial's or chosen setting, the device it trains on and why
        (:meth:`job_device`).  Derived from the job's inputs, so not a rerun trigger."""
        cell = self._cell(wildcards)
        device, reason = self.job_device(cell, input.summary)
        return cell_job(self._run_config(kind, wildcards, input), cell, device, reason).as_params()

    def reusable_run(self, wildcards, input) -> str | None:
        """For a tuned run: the paper-setting run of its cell and seed where tuning chose a setting with the same
        numbers (:func:`fedbench.run.reuse.same_numbers`); the job copies it if it finished with the code now."""
        cell = self._cell(wildcards)
        tuned = resolve_cell(self._run_config("tuned", wildcards, input), cell)
        return Run("train", cell).directory(self.results) if same_numbers(resolve_cell(self.config, cell), tuned) else None

    @staticmethod
    def _cell(w) -> Cell:
        return Cell(w.experiment, w.dataset, w.partition, w.model, w.algorithm, int(w.seed))

    def job_device(self, cell: Cell, summary_path: str) -> tuple[str, str]:
        """The device a training job trains on and why: ``cpu``/``cuda[:N]`` as the config names it; under ``auto``
        the CPU where no GPU is in reach, else the device the cost model estimates faster for the cell
        (:func:`fedbench.cost.device.choose_device`: a tiny model's rounds can be slower on a GPU than on the CPU)."""
        requested = self.config["device"]
        if requested != "auto":
            return requested, f"device: {requested} (the config's)"
        if self.device() != "cuda":
            return "cpu", "device auto: no CUDA available"
        return self._auto_device(cell.experiment, cell.dataset, cell.partition, cell.model, cell.algorithm, summary_path)

    @functools.lru_cache(maxsize=None)
    def _auto_device(self, experiment, dataset, partition, model, algorithm, summary_path) -> tuple[str, str]:
        spec = resolve_cell(self.config, Cell(experiment, dataset, partition, model, algorithm, 0))
        with open(summary_path) as f:
            summary = json.load(f)
        shape = summary_shape(summary) if "input_shape" in summary else estimated_shape(spec["dataset"], spec["partition"])
        return choose_device(spec, shape)

    # ---- sources of tables and figures ------------------------------------------------------------

    def library_sources(self, *patterns: str) -> list[str]:
        """Repository files matching ``patterns`` (relative to the repository root), sorted."""
        return sorted({p for pattern in patterns for p in glob.glob(os.path.join(self.basedir, pattern), recursive=True)})

    def results_sources(self) -> list[str]:
        """Tables and figures: their library code and their rule scripts (an input each, so that an edit
        redraws them: the workflow profile leaves Snakemake's ``code`` trigger off)."""
        scripts = [p for p in self.library_sources("workflow/scripts/*.py") if os.path.basename(p) not in STAGE_SCRIPTS]
        return self.library_sources("fedbench/results/**/*.py") + scripts

    # ---- the claims, look by look -----------------------------------------------------------------

    def claimed_experiments(self, paper: str | None = None) -> set[str]:
        """The experiments with cells that a claim (of ``paper``, or any) is tested on."""
        return ({self.config["claims"][n]["experiment"] for n in evaluated_claims(self.config, paper)}
                & set(self.experiments()))

    def claims_files(self) -> list[str]:
        """Per paper with a claim on an experiment that has cells: its claims table (CSV, Markdown)."""
        papers = config_papers(self.config, self.claimed_experiments())
        return [f"{self.results}/tables/{p}/claims.{x}" for p in papers for x in ("csv", "md")]

    def claims_tuning_blocks(self, experiment: str | None = None) -> list[tuple]:
        """Every algorithm entry's cells that a tuned claim reads: the trials the ``claims`` target runs anyway."""
        with_cells = self.claimed_experiments()
        blocks = set()
        for name in evaluated_claims(self.config, None, "tuned"):
            claim = self.config["claims"][name]
            if claim["experiment"] in with_cells and experiment in (None, claim["experiment"]):
                blocks.update((claim["experiment"], d, p, m, a) for d, p, m in claim_cells(self.config, name)
                              for a in claim_algorithms(claim))
        return sorted(blocks)

    def claims_tuning_trials(self, wildcards) -> list[str]:
        """``trials.csv`` of every entry one tuned experiment's claims compare (the claims' sensitivity figure)."""
        return [f"{self.results}/tuning/{e}/{d}/{p}/{m}/{a}/trials.csv" for e, d, p, m, a in
                self.claims_tuning_blocks(wildcards.experiment)]

    def claims_tuning_figures(self) -> list[str]:
        """One sensitivity figure per tuned experiment a claim reads: the compared methods' trials only."""
        return [f"{self.results}/figures/claims/tuning_{e}.png" for e in sorted({b[0] for b in self.claims_tuning_blocks()})]

    def claim_settings(self, paper: str) -> list[str]:
        """``paper`` and, where a claim of the paper is on a tuned experiment, ``tuned``."""
        with_cells = self.claimed_experiments(paper)
        return [s for s in ("paper", "tuned") if any(self.config["claims"][n]["experiment"] in with_cells
                                                     for n in evaluated_claims(self.config, paper, s))]

    def _open_claims(self, paper: str, setting: str, look: int) -> list[str]:
        """The claims look ``look`` reads: every claim of the paper at the setting at look 0, else those the
        previous look left open."""
        if look == 0:
            with_cells = self.claimed_experiments(paper)
            return [n for n in evaluated_claims(self.config, paper, setting) if self.config["claims"][n]["experiment"] in with_cells]
        with open(self.look_file(paper, setting, look - 1)) as f:
            return json.load(f)["open"]

    def run_priority(self, kind: str) -> Callable:
        """A training rule's ``priority:`` (a function of the job's wildcards): :data:`RUN_PRIORITY` of the kind,
        plus :data:`CLAIM_PRIORITY` for the runs an open claim waits for -- the trials of a tuned claim's
        methods, the runs of every paper's next look (an earlier look first) -- so that the looks are read, and
        the claims they close stop asking for seeds, before the rest of the grid trains."""

        def priority(wildcards) -> int:
            return RUN_PRIORITY[kind] + self._claims_waiting().get((kind, *self._block(wildcards), int(wildcards.seed)), 0)

        return priority

    @staticmethod
    def _block(w) -> tuple:
        return w.experiment, w.dataset, w.partition, w.model, w.algorithm

    def _claims_waiting(self) -> dict[tuple, int]:
        """(kind, experiment, dataset, partition, model, algorithm, seed) -> the priority it adds, for every
        run an open claim waits for, from the look files on disk now (recomputed when one appears)."""
        looks = self.config.get("claims_design", {}).get("looks") or []
        state = []  # per paper and setting: the first look not on disk
        for paper, setting in self._claim_settings_by_paper:
            k = 0
            while os.path.exists(self._look_on_disk(paper, setting, k)):
                k += 1
            state.append((paper, setting, k))
        return self._waiting(tuple(state), len(looks))

    @functools.cached_property
    def _claim_settings_by_paper(self) -> list[tuple[str, str]]:
        """(paper, setting) of every paper with a claim on an experiment that has cells (once per plan, not per job)."""
        return [(p, s) for p in config_papers(self.config, self.claimed_experiments()) for s in self.claim_settings(p)]

    def _look_on_disk(self, paper: str, setting: str, look: int) -> str:
        return f"{self.results}/claims/{paper}/{setting}/look{look}.json"

    @functools.lru_cache(maxsize=8)
    def _waiting(self, state: tuple, num_looks: int) -> dict[tuple, int]:
        waiting: dict[tuple, int] = {}
        for paper, setting, k in state:
            last = json.loads(Path(self._look_on_disk(paper, setting, k - 1)).read_text()) if k else None
            if last is not None and last["done"]:
                continue  # every claim of the paper at the setting is decided
            bonus = CLAIM_PRIORITY + max(num_looks - k, 0)  # an earlier look first
            open_claims = self._open_claims(paper, setting, 0) if last is None else last["open"]
            runs = look_runs(self.config, open_claims, setting, k)
            if setting == "tuned":  # the tuned runs wait for their methods' trials
                runs += [trial for block in sorted({r.block for r in runs}) for trial in block_trials(self.config, block)]
            for run in runs:
                key = (run.kind, *dataclasses.astuple(run.cell))
                waiting[key] = max(waiting.get(key, 0), bonus + (run.kind == "trial"))
        return waiting

    def look_runs(self, paper: str, setting: str, look: int, name: str) -> list[str]:
        """``name`` of every run look ``look`` of ``paper``'s claims at ``setting`` reads."""
        runs = look_runs(self.config, self._open_claims(paper, setting, look), setting, look)
        return sorted(set(self._files(runs, name)))

    def previous_look(self, paper: str, setting: str, look: int) -> list[str]:
        return [] if look == 0 else [f"{self.results}/claims/{paper}/{setting}/look{look - 1}.json"]

    def final_looks(self, paper: str, setting: str) -> list[str]:
        """The look files of ``paper``'s claims at ``setting``, from the first until the one that closes them."""
        looks = []
        while True:
            looks.append(self.look_file(paper, setting, len(looks)))
            with open(looks[-1]) as f:
                if json.load(f)["done"]:
                    return looks

    def claims_runs(self, wildcards, name: str, setting: str = "paper") -> list[str]:
        """``name`` of every run the looks of the paper's claims at ``setting`` read."""
        if setting not in self.claim_settings(wildcards.paper):
            return []
        looks = self.final_looks(wildcards.paper, setting)
        return sorted({f for look in range(len(looks)) for f in self.look_runs(wildcards.paper, setting, look, name)})

    def claims_looks(self, wildcards) -> list[str]:
        return [look for s in self.claim_settings(wildcards.paper) for look in self.final_looks(wildcards.paper, s)]

"""Which training jobs a config plans, and where each writes: the one answer that the workflow
(``workflow/rules/common.smk``), the cost report (:mod:`fedbench.planning.cost_report`) and ``make stale``
(:mod:`fedbench.planning.stale`) read.

A job is a :class:`Run`: a cell at the paper's setting (``train``), a tuning trial on a tuning seed
(``trial``), or the setting tuning chose re-run on a final seed (``tuned``); paths come from
:mod:`fedbench.config.layout`.  :func:`planned_runs` lists every run the plan may write: the cells at
the config's seeds, every tuned experiment's trials and tuned runs, and the seeds the claims' looks may
add (``added``: every claim undecided until the design's cap).  Which of the added ones a look really
asks for depends on the looks before it: :func:`look_runs` (the claims' sequential design,
:mod:`fedbench.results.sequential`)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Iterable

from fedbench.config import layout
from fedbench.config.cells import Cell, expand_cells
from fedbench.results.claims.spec import claim_algorithms, claim_cells, claims_design, design_seeds, evaluated_claims
from fedbench.tuning.trials import trial_config, tune_block, tuned_experiments

Block = tuple[str, str, str, str, str]  # (experiment, dataset, partition, model, algorithm): one entry's cells


@dataclass(frozen=True, order=True)
class Run:
    """One training job of the plan: its ``kind`` (:data:`fedbench.config.layout.RUN_KINDS`), cell and, for
    a tuning trial, the trial; ``added``: a seed beyond the config's that only the claims' looks may ask for."""

    kind: str
    cell: Cell
    trial: int | None = None
    added: bool = False

    @property
    def block(self) -> Block:
        c = self.cell
        return c.experiment, c.dataset, c.partition, c.model, c.algorithm

    @property
    def fields(self) -> dict:
        """The run's path fields: the cell's, its seed and its trial (a trial only)."""
        return {**asdict(self.cell), **({} if self.trial is None else {"trial": self.trial})}

    def directory(self, results: str) -> str:
        return layout.run_dir(results, self.kind, **self.fields)

    def file(self, results: str, name: str) -> str:
        """``name`` (``metrics.json``, ``history.csv``, ``clients.csv``) of the run directory."""
        return f"{self.directory(results)}/{name}"

    def config(self, config: dict) -> dict:
        """The config the run trains under: a trial's setting applied (:func:`fedbench.tuning.trials.trial_config`);
        the config itself for the others (a tuned run's chosen setting is known once its trials are done)."""
        return trial_config(config, self.cell.experiment, self.cell.algorithm, self.trial) if self.kind == "trial" else config


def _blocks(cells: Iterable[Cell]) -> list[Block]:
    return sorted({(c.experiment, c.dataset, c.partition, c.model, c.algorithm) for c in cells})


def tuned_blocks(config: dict, experiment: str | None = None) -> list[Block]:
    """Every algorithm entry's cells of the tuned experiments (or of one)."""
    tuned = set(tuned_experiments(config))
    return [b for b in _blocks(expand_cells(config)) if b[0] in tuned and experiment in (None, b[0])]


def block_trials(config: dict, block: Block) -> list[Run]:
    """Every trial of one algorithm entry in one cell: the tune block's trials x its tuning seeds."""
    tune = tune_block(config, block[0])
    return [Run("trial", Cell(*block, int(seed)), trial) for trial in range(tune["trials"]) for seed in tune["seeds"]]


def claimed_blocks(config: dict, setting: str | None = None) -> set[Block]:
    """The algorithm entries a claim reads (at ``setting``, ``paper`` or ``tuned``; None: either)."""
    names = evaluated_claims(config, None, setting or "paper")
    return {(config["claims"][n]["experiment"], d, p, m, a) for n in names
            for d, p, m in claim_cells(config, n) for a in claim_algorithms(config["claims"][n])}


def planned_runs(config: dict, claims_only: bool = False, added: bool = True) -> list[Run]:
    """Every training job the workflow may run: each cell at the config's seeds; for each tuned experiment its
    trials and its tuned runs at the config's seeds; and the seeds the claims' looks may add, at most (``added``:
    at the paper's setting and, where the claim's experiment is tuned, tuned).  ``claims_only``: those of the
    ``claims`` target alone, the algorithm entries a claim reads; ``added=False``: without the added seeds (the
    planning estimate, which does not count them: its work does not grow with the design's seed cap)."""
    keep = claimed_blocks(config) if claims_only else None
    cells = [c for c in expand_cells(config)
             if keep is None or (c.experiment, c.dataset, c.partition, c.model, c.algorithm) in keep]
    runs = [Run("train", c) for c in cells]
    for experiment in tuned_experiments(config):
        for block in (b for b in _blocks(cells) if b[0] == experiment):
            runs += block_trials(config, block)
            runs += [Run("tuned", Cell(*block, int(seed))) for seed in config["seeds"]]
    if not added:
        return runs
    extra = design_seeds(config)[len(config["seeds"]):]
    added = {Run(kind, Cell(*block, seed), added=True)
             for kind, blocks in (("train", claimed_blocks(config, "paper")), ("tuned", claimed_blocks(config, "tuned")))
             for block in blocks for seed in extra}
    return runs + sorted(added)


def look_runs(config: dict, claim_names: Iterable[str], setting: str, look: int) -> list[Run]:
    """The runs look ``look`` of the claims ``claim_names`` at ``setting`` (``paper``, ``tuned``) reads: every
    entry those claims compare, in every cell they are tested on, at the design's first seeds up to the
    look's count."""
    seeds = design_seeds(config)[: claims_design(config)["looks"][look]]
    kind = layout.SETTING_KINDS[setting]
    blocks = {(config["claims"][n]["experiment"], d, p, m, a) for n in claim_names
              for d, p, m in claim_cells(config, n) for a in claim_algorithms(config["claims"][n])}
    return [Run(kind, Cell(*block, seed)) for block, seed in itertools.product(sorted(blocks), seeds)]


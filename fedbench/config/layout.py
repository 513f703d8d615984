"""Where a config's jobs write under its ``results:`` root, written once: the run directory of each
kind of training run, its log and Snakemake benchmark, and a partition's files.

A training run is one of three kinds (:data:`RUN_KINDS`): ``train``, a cell at the paper's setting
(rule ``train_cell``, ``runs/``); ``trial``, a tuning trial (``tune_trial``, ``tuning/trials/``, one
directory per trial); ``tuned``, the chosen setting re-run (``train_tuned``, ``tuned/runs/``).  The
same functions give a concrete path (``seed=3``) or the rule's pattern (:func:`run_pattern`: the
fields as Snakemake wildcards)."""

from __future__ import annotations

from dataclasses import dataclass

CELL_FIELDS = ("experiment", "dataset", "partition", "model", "algorithm")


@dataclass(frozen=True)
class RunKind:
    """One kind of training run: where its outputs go (``outputs``), the stage its logs and benchmarks are
    filed under (``stage``), the rule that writes it, and the path below the cell (``suffix``)."""

    outputs: str
    stage: str
    rule: str
    suffix: str


RUN_KINDS = {
    "train": RunKind("runs", "train", "train_cell", "seed{seed}"),
    "trial": RunKind("tuning/trials", "tune", "tune_trial", "trial{trial}/seed{seed}"),
    "tuned": RunKind("tuned/runs", "tuned", "train_tuned", "seed{seed}"),
}
SETTING_KINDS = {"paper": "train", "tuned": "tuned"}  # a claim's setting -> the runs it reads


def _relative(kind: str, fields: dict) -> str:
    template = "/".join(f"{{{name}}}" for name in CELL_FIELDS) + "/" + RUN_KINDS[kind].suffix
    return template.format(**fields)


def run_dir(results: str, kind: str = "train", **fields) -> str:
    """The run directory of one run: ``fields`` are the cell's (experiment ... algorithm), ``seed`` and,
    for a trial, ``trial``."""
    return f"{results}/{RUN_KINDS[kind].outputs}/{_relative(kind, fields)}"


def log_path(results: str, kind: str = "train", **fields) -> str:
    return f"{results}/logs/{RUN_KINDS[kind].stage}/{_relative(kind, fields)}.log"


def benchmark_path(results: str, kind: str = "train", **fields) -> str:
    return f"{results}/benchmarks/{RUN_KINDS[kind].stage}/{_relative(kind, fields)}.tsv"


def wildcards(kind: str) -> dict[str, str]:
    """Every field of a ``kind`` run as its Snakemake wildcard (``{"seed": "{seed}", ...}``)."""
    names = CELL_FIELDS + ("seed",) + (("trial",) if "{trial}" in RUN_KINDS[kind].suffix else ())
    return {name: f"{{{name}}}" for name in names}


def run_pattern(results: str, kind: str) -> str:
    """A ``kind`` run's directory with its fields as wildcards: the rule's output pattern."""
    return run_dir(results, kind, **wildcards(kind))


def partition_stem(results: str, dataset: str, partition: str, seed) -> str:
    """A partition's files without their suffix (``.npz``, ``.json`` summary, ``.png`` heatmap)."""
    return f"{results}/partitions/{dataset}/{partition}/seed{seed}"

"""The algorithm contract: what every registered algorithm, built-in or plugin, must do in a cell.

Each property is checked on one tiny cell (:class:`Case`: 4 clients of scikit-learn's digits, an
8-unit MLP, 2 rounds, checkpoints every round), run through the pipeline's own stages:

* ``deterministic``: two runs with the same seed give the same state after every round and the same outputs;
* ``resume``: a run killed after round 1 and restarted from its checkpoint ends with the outputs of an
  uninterrupted one (an algorithm that keeps state outside its ``state`` dict fails it);
* ``checkpoint``: the state after every round comes back equal from a checkpoint file;
* ``test_rows``: training never reads test rows: with the test rows' features and labels poisoned,
  the state after every round is the same;
* ``ignored_training``: each training setting the algorithm declares it ignores, changed, changes no
  state (or, for a setting with a ``harmless_training`` value, is refused with an error);
* ``scoring``: the history's scores are those of the models the algorithm says it scores
  (``client_models`` with ``scoring_model`` on each client's test rows, ``global_model`` on the
  pooled test rows, recomputed here one client at a time), and asking for them twice gives the same
  models and draws nothing from training's random stream;
* ``workload``: the workload it declares (:meth:`~fedbench.algorithms.base.Algorithm.workload`) is a
  well-typed :class:`~fedbench.registry.workload.Workload` and says what it trains: in every round the clients
  the engine trains (every client, or the round's sampled ones), each the declared passes over its rows
  or minibatch steps, and before an evaluation the declared fine-tuning of every client (counted where the
  engine trains: its trainers' batch plans, its gradient oracle's steps; a round trained elsewhere is not).

A property that cannot apply to an algorithm is declared exempt on its case, with the reason
(``Case(exempt={"resume": "why"})``); the report lists it.  From a shell::

    python -m fedbench.extension.contract my_package.my_method            # every algorithm the plugin registers
    python -m fedbench.extension.contract fedavg --param local_steps=2     # a registered algorithm, with parameters
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml

from fedbench.registry.algorithms import ALGORITHMS
from fedbench.run.checkpoint import load_checkpoint, save_checkpoint
from fedbench.config.cells import Cell
from fedbench.config.checks import check_entries
from fedbench.cost.work import scored_models
from fedbench.registry.workload import Workload, declared_workload
from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import model_weights
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.outputs import write
from fedbench.run.stages import checkpoint, due, evaluate, prepare, resume, train_round
from fedbench.registry.plugins import PluginError, load_plugin, load_plugins

PROPERTIES = ("deterministic", "resume", "checkpoint", "test_rows", "ignored_training", "scoring", "workload")
TINY_TRAINING = {"rounds": 2, "batch_size": 16, "lr": 0.1, "participation": 0.75, "eval_every": 1, "checkpoint_every": 1}
# a value other than the default for every training setting an algorithm may declare it ignores
ALTERNATIVES = {"local_epochs": 2, "momentum": 0.5, "batch_size": 7, "lr": 0.05, "weight_decay": 0.001,
                "participation": 0.5, "bn_aggregation": "local_stats", "channels_last": True}
RUN_ONLY = ("wall_time_s", "peak_memory")  # how long and how much memory, never a result
CELL = Cell("contract", "data", "part", "model", "algorithm", 0)


class ContractFailure(AssertionError):
    """An algorithm breaks the contract; the message lists every failed property."""


class Unchecked(str):
    """What a property could not look at (it passes, with this said in the report)."""


@dataclass(frozen=True)
class Case:
    """One algorithm entry and the tiny cell it is checked on (the defaults suit most algorithms)."""

    method: str  # the registered algorithm
    params: dict = field(default_factory=dict)  # its entry's parameters
    model: dict = field(default_factory=lambda: {"arch": "mlp", "hidden": [8]})
    dataset: dict = field(default_factory=lambda: {"source": "digits"})
    partition: dict = field(default_factory=lambda: {"kind": "dirichlet", "alpha": 0.5, "num_clients": 4,
                                                     "test_fraction": 0.25})
    training: dict = field(default_factory=dict)  # over TINY_TRAINING
    encoders: dict = field(default_factory=dict)  # encoders entries pretrained first (FLT)
    plugins: tuple[str, ...] = ()  # the config's plugins key
    exempt: dict = field(default_factory=dict)  # property -> why it cannot apply

    def config(self, results: Path) -> dict:
        """The one-cell config of this case, its results under ``results`` (TINY_TRAINING's settings
        that the algorithm declares it ignores left at their defaults, as a config must)."""
        load_plugins(self.plugins)
        ignored = ALGORITHMS[self.method](**self.params).ignored_training
        training = {**{k: v for k, v in TINY_TRAINING.items() if k not in ignored}, **self.training}
        return {
            "results": str(results), "device": "cpu", "seeds": [0], "plugins": list(self.plugins),
            "datasets": {"data": dict(self.dataset)}, "partitions": {"part": dict(self.partition)},
            "models": {"model": dict(self.model)}, "algorithms": {"algorithm": {"method": self.method, **self.params}},
            "encoders": {name: dict(entry) for name, entry in self.encoders.items()},
            "experiments": {"contract": {"training": training, "grid": [
                {"datasets": ["data"], "partitions": ["part"], "models": ["model"], "algorithms": ["algorithm"]}]}},
        }


@dataclass
class Report:
    """Every property's verdict: ``pass``, ``fail`` or ``exempt``, with its detail."""

    case: Case
    results: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def failures(self) -> dict[str, str]:
        return {name: detail for name, (verdict, detail) in self.results.items() if verdict == "fail"}

    def lines(self) -> list[str]:
        return [f"{self.case.method}: {name}: {verdict}" + (f" ({detail})" if detail else "")
                for name, (verdict, detail) in self.results.items()]

    def raise_for_failures(self) -> None:
        if self.failures:
            raise ContractFailure("\n".join(line for line in self.lines() if ": fail" in line))


# ---- comparing states and outputs ---------------------------------------------------------------------


def difference(a, b, where: str = "state") -> str | None:
    """Where ``a`` and ``b`` first differ (tensors and arrays bit for bit, NaN equal to NaN); None: equal."""
    if hasattr(a, "state_dict") and hasattr(b, "state_dict"):  # a module or an optimiser kept in the state
        if type(a) is not type(b):
            return f"{where} is a {type(a).__name__} against a {type(b).__name__}"
        return difference(a.state_dict(), b.state_dict(), f"{where}.state_dict()")
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{where} has keys {sorted(map(str, a))} against {sorted(map(str, b))}"
        return next((d for key in a if (d := difference(a[key], b[key], f"{where}[{key!r}]"))), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{where} is a {type(a).__name__} of {len(a)} against a {type(b).__name__} of {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := difference(x, y, f"{where}[{i}]"))), None)
    if isinstance(a, (torch.Tensor, np.ndarray)) or isinstance(b, (torch.Tensor, np.ndarray)):
        if type(a) is not type(b):
            return f"{where} is a {type(a).__name__} against a {type(b).__name__}"
        x, y = (torch.as_tensor(v).detach().cpu() for v in (a, b))
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{where} has shape {tuple(x.shape)} {x.dtype} against {tuple(y.shape)} {y.dtype}"
        same = (x == y) | (torch.isnan(x) & torch.isnan(y)) if x.is_floating_point() else x == y
        if bool(same.all()):
            return None
        gap = (x.double() - y.double()).abs().nan_to_num(nan=float("inf")).max() if x.is_floating_point() else None
        return f"{where} differs" + (f" (largest difference {float(gap):.3g})" if gap is not None else "")
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return None
    return None if type(a) is type(b) and a == b else f"{where} is {a!r} against {b!r}"


def outputs(out: Path) -> dict:
    """A finished run's results: metrics.json (without time and memory), history.csv and clients.csv."""
    metrics = json.loads((out / "metrics.json").read_text())
    return {"metrics.json": {k: v for k, v in metrics.items() if k not in RUN_ONLY},
            **{name: pd.read_csv(out / name).to_dict("list") for name in ("history.csv", "clients.csv")}}


# ---- one run, stage by stage ---------------------------------------------------------------------------


@dataclass
class Trajectory:
    """One run: the state after every round it trained, its outputs (None: killed), its last stages."""

    states: dict[int, dict]
    outputs: dict | None
    run: object
    progress: object


def trajectory(config: dict, partition: Path, out: Path, stop_after: int | None = None,
               poison: bool = False) -> Trajectory:
    """Run the contract's cell as ``run_cell`` does (resuming from a checkpoint in ``out`` if there is
    one), recording the state after every round; ``stop_after``: end after that round's checkpoint as a
    killed job would; ``poison``: first replace every test row's features and labels."""
    run = prepare(cell_job(config, CELL), partition, out)
    if poison:
        poison_test_rows(run.fed.data)
    progress = resume(run, run.algorithm.init(run.fed, model_weights(run.fed.model)))
    rounds, states = run.training["rounds"], {}
    for t in range(progress.first, rounds + 1):
        if not train_round(run, progress, t):
            raise ContractFailure(f"the training loss is not finite at round {t}; the contract needs a cell that trains")
        states[t] = copy.deepcopy(progress.state)
        if due(t, run.training["eval_every"], rounds):
            evaluate(run, progress, t)
        checkpoint(run, progress, t)
        if t == stop_after:
            return Trajectory(states, None, run, progress)
    write(run, progress)
    return Trajectory(states, outputs(Path(out)), run, progress)


def poison_test_rows(data) -> None:
    """Overwrite every test row of ``data``: large random features, every label shifted by one (on a
    copy of its tensors, which a dataset source that caches its arrays may share with other runs)."""
    object.__setattr__(data, "x", data.x.clone())  # a frozen dataclass: the trainer reads data.x afresh
    object.__setattr__(data, "y", data.y.clone())
    rows = data.test.union
    noise = torch.Generator().manual_seed(12345)
    data.x[rows] = 10 * torch.randn(data.x[rows].shape, generator=noise).to(data.x)
    data.y[rows] = (data.y[rows] + 1) % data.num_classes


def with_training(config: dict, **changes) -> dict:
    changed = copy.deepcopy(config)
    changed["experiments"]["contract"]["training"].update(changes)
    return changed


# ---- the properties ---------------------------------------------------------------------------------------


def _same_run(a: Trajectory, b: Trajectory, what: str) -> str | None:
    for t in a.states:
        if t in b.states and (d := difference(a.states[t], b.states[t], f"state after round {t}")):
            return f"{what}: {d}"
    if a.outputs is not None and b.outputs is not None and (d := difference(a.outputs, b.outputs, "outputs")):
        return f"{what}: {d}"
    return None


def check_deterministic(config, partition, work, whole) -> str | None:
    return _same_run(whole, trajectory(config, partition, work / "again"), "a second run with the same seed")


def check_resume(config, partition, work, whole) -> str | None:
    killed = trajectory(config, partition, work / "killed", stop_after=1)
    if d := _same_run(whole, killed, "the run before it was killed"):
        return d
    resumed = trajectory(config, partition, work / "killed")
    if min(resumed.states, default=0) != 2:
        return "the restarted run did not continue from its checkpoint"
    return _same_run(whole, resumed, "killed after round 1 and resumed")


def check_checkpoint(config, partition, work, whole) -> str | None:
    for t, state in whole.states.items():
        path = work / f"state{t}.pt"
        save_checkpoint(path, {"round": t, "fingerprint": "contract", "state": state})
        if d := difference(state, load_checkpoint(path, "contract")["state"], f"state after round {t}"):
            return f"through a checkpoint file: {d}"
    return None


def check_test_rows(config, partition, work, whole) -> str | None:
    return _same_run(replace_outputs(whole), trajectory(config, partition, work / "poisoned", poison=True),
                     "with the test rows poisoned (training read them)")


def replace_outputs(run: Trajectory) -> Trajectory:
    """The run without its outputs: only the states are compared (the scores move with the test rows)."""
    return Trajectory(run.states, None, run.run, run.progress)


def check_ignored_training(config, partition, work, whole) -> str | None:
    algorithm = whole.run.algorithm
    problems = []
    for setting in algorithm.ignored_training:
        value = ALTERNATIVES.get(setting)
        if value is None:
            problems.append(f"{setting}: the contract knows no other value to try")
            continue
        try:
            changed = trajectory(with_training(config, **{setting: value}), partition, work / f"ignored_{setting}")
        except Exception as error:
            if setting in algorithm.harmless_training:
                continue  # refused loudly, as a setting with a harmless value may be
            problems.append(f"{setting} = {value!r} fails ({type(error).__name__}: {error})")
            continue
        if d := _same_run(replace_outputs(whole), changed, f"{setting} = {value!r}"):
            problems.append(d)
    return "; ".join(problems) or None


def check_scoring(config, partition, work, whole) -> str | None:
    fed, algorithm, progress = whole.run.fed, whole.run.algorithm, whole.progress
    state, row = progress.state, progress.history[-1]
    t = row["round"]
    before, shared = fed.generator.get_state(), dict(fed.draws)
    models = algorithm.client_models(fed, state, t)
    again = algorithm.client_models(fed, state, t)
    global_weights = algorithm.global_model(fed, state)
    if not torch.equal(before, fed.generator.get_state()):
        return "client_models or global_model draws from training's random stream (fed.generator)"
    if fed.draws != shared:
        return f"client_models or global_model draws from training's shared streams ({fed.draws} after, {shared} before)"
    if d := difference(models, again, "client_models"):
        return f"client_models gives other models when asked twice: {d}"
    scoring = algorithm.scoring_model(fed, state)
    scoring = fed.model if scoring is None else scoring
    expected = set(scoring.state_dict())
    if set(models) != expected:
        return f"client_models has keys {sorted(models)}, the scored module {sorted(expected)}"
    wrong = [k for k, v in models.items() if v.shape[0] != fed.num_clients]
    if wrong:
        return f"client_models has no row per client ({fed.num_clients}) for {', '.join(wrong)}"
    if scored_models(whole.run.spec["algorithm"], whole.run.training) == "global":  # what the cost model counts
        if d := difference(models, {k: v[:1].expand_as(v) for k, v in models.items()}, "client_models"):
            return f"scored_models is 'global' but the clients' models differ: {d}"
    accuracy = [_accuracy(scoring, {k: v[c] for k, v in models.items()}, fed.data, fed.data.test, c)
                for c in range(fed.num_clients)]
    if not np.isclose(np.nanmean(accuracy), row["acc_mean"], atol=1e-6):
        return f"the history's acc_mean {row['acc_mean']:.6f} is not the clients' models' {np.nanmean(accuracy):.6f}"
    if global_weights is not None:
        pooled = _accuracy(fed.model, global_weights, fed.data, fed.data.test, None)
        if not np.isclose(pooled, row["global_acc"], atol=1e-6):
            return f"the history's global_acc {row['global_acc']:.6f} is not the global model's {pooled:.6f}"
    elif not np.isnan(row["global_acc"]):
        return "global_model is None but the history scores a global model"
    return None


@dataclass
class TrainingDone:
    """Local training counted per client: samples through the engine's trainers, minibatch steps through its
    gradient oracle."""

    samples: Counter = field(default_factory=Counter)
    steps: Counter = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.samples or self.steps)


@contextlib.contextmanager
def counted_training():
    """A :class:`TrainingDone` counting, while the block runs, every client's local training where the engine
    does it: each ``train(start, clients, plan, ...)`` of a trainer (the plan's epochs x the client's rows) and
    each step or gradient of the minibatch oracle (one step for every client it is taken for); a call made
    inside another counted one (the oracle's step through its gradient) counts once."""
    done, depth = TrainingDone(), [0]

    def counting(original, count):
        def wrapper(self, *args, **kwargs):
            if not depth[0]:
                count(*args, **kwargs)
            depth[0] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
        return wrapper

    def planned(start, clients, plan, *rest, **kwargs):
        for client, rows in zip(clients.tolist(), plan.counts.tolist()):
            done.samples[client] += plan.epochs * rows

    def stepped(params, batch, clients, *rest, **kwargs):
        for client in clients.tolist():
            done.steps[client] += 1

    patched = [(VectorisedTrainer, "train", planned), (ReferenceTrainer, "train", planned),
               (MinibatchGradients, "step", stepped), (MinibatchGradients, "__call__", stepped)]
    originals = [(cls, name, cls.__dict__[name]) for cls, name, _ in patched]
    for cls, name, count in patched:
        setattr(cls, name, counting(cls.__dict__[name], count))
    try:
        yield done
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def _against(done: TrainingDone, workload: Workload, clients: Counter, rows: list[int]) -> str | None:
    """Where ``done`` is not ``workload``'s training of ``clients`` (client -> times it is drawn in the round, a
    client drawn twice training twice) with their training ``rows``; None: it is."""
    trained = sorted(set(done.samples) | set(done.steps))
    if trained != sorted(clients):
        return f"trains clients {trained}, declares {sorted(clients)}"
    for c, times in sorted(clients.items()):
        drawn = f"{times} draws x " if times > 1 else ""
        if workload.local_steps:
            declared = times * workload.local_steps * workload.batches_per_step
            if done.samples[c] or done.steps[c] != declared:
                return (f"client {c} took {done.steps[c]} minibatch steps and {done.samples[c]} samples through a trainer, "
                        f"declares {drawn}{workload.local_steps} steps x {workload.batches_per_step} batches = {declared} steps")
        elif done.steps[c] or done.samples[c] != times * workload.local_passes * rows[c]:
            return (f"client {c} processed {done.samples[c]} samples and {done.steps[c]} minibatch steps, declares {drawn}"
                    f"{workload.local_passes:g} passes x {rows[c]} rows = {times * workload.local_passes * rows[c]:g} samples")
    return None


def check_workload(config, partition, work, whole) -> str | None:
    try:
        workload = declared_workload(whole.run.spec["algorithm"], whole.run.training)
    except (TypeError, ValueError) as error:
        return f"its workload declaration: {error}"
    run = prepare(cell_job(config, CELL), partition, work / "workload")
    fed, rounds = run.fed, run.training["rounds"]
    rows = fed.data.train.counts.tolist()
    everyone = Counter(range(fed.num_clients))
    progress = resume(run, run.algorithm.init(fed, model_weights(fed.model)))
    uncounted = []
    for t in range(progress.first, rounds + 1):
        with counted_training() as done:
            train_round(run, progress, t)
        if not done:
            uncounted.append(t)
            continue
        sampled = Counter([] if fed.sampled is None else fed.sampled.tolist())
        if problem := _against(done, workload, everyone if workload.every_client_trains else sampled, rows):
            return f"round {t} {problem} ({'every client' if workload.every_client_trains else 'the sampled ones'})"
    with counted_training() as done:
        run.algorithm.client_models(fed, progress.state, rounds)
    tuned = {c: workload.evaluation_finetune_epochs * rows[c] for c in everyone if workload.evaluation_finetune_epochs}
    if +done.samples != tuned:
        return (f"scoring fine-tunes {dict(+done.samples)} samples per client, declares "
                f"{workload.evaluation_finetune_epochs} epochs of every client's rows: {tuned}")
    if uncounted:
        return Unchecked(f"round{'s' if len(uncounted) > 1 else ''} {', '.join(map(str, uncounted))} "
                         "trained outside the engine's trainers and gradient oracle: not counted")
    return None


@torch.no_grad()
def _accuracy(module, weights, data, index, client) -> float:
    """Accuracy of ``module`` with ``weights`` on ``client``'s rows of ``index`` (None: every client's)."""
    rows = index.union if client is None else index.index[client, : int(index.counts[client])]
    if len(rows) == 0:
        return float("nan")
    was_training = module.training
    module.eval()
    try:
        logits = torch.func.functional_call(module, weights, (data.x[rows],))
    finally:
        module.train(was_training)
    return float((logits.argmax(1) == data.y[rows]).double().mean())


CHECKS = {"deterministic": check_deterministic, "resume": check_resume, "checkpoint": check_checkpoint,
          "test_rows": check_test_rows, "ignored_training": check_ignored_training, "scoring": check_scoring,
          "workload": check_workload}


def check_algorithm(case: Case, workdir: Path | None = None, properties=PROPERTIES) -> Report:
    """Check ``properties`` of ``case``'s algorithm (its entry validated as a config's would be first)."""
    unknown = sorted(set(properties) - set(PROPERTIES)) + sorted(set(case.exempt) - set(PROPERTIES))
    if unknown:
        raise ValueError(f"unknown contract properties {unknown}; valid: {', '.join(PROPERTIES)}")
    with tempfile.TemporaryDirectory(prefix="fedbench-contract-") as scratch:
        work = Path(workdir or scratch)
        config = case.config(work / "results")
        check_entries(config)
        _pretrain_encoders(config)
        partition = work / "partition.npz"
        build_partition(config, "data", "part", 0, partition, work / "partition.json")
        whole = trajectory(config, partition, work / "whole")
        report = Report(case)
        for name in properties:
            if name in case.exempt:
                report.results[name] = ("exempt", case.exempt[name])
                continue
            try:
                problem = CHECKS[name](config, partition, work, whole)
            except ContractFailure as failure:
                problem = str(failure)
            vacuous = name == "ignored_training" and not whole.run.algorithm.ignored_training
            if isinstance(problem, Unchecked):
                report.results[name] = ("pass", str(problem))
            else:
                report.results[name] = ("fail", problem) if problem else ("pass", "declares none" if vacuous else "")
    return report


def _pretrain_encoders(config: dict) -> None:
    from fedbench.algorithms.flt_encoders import pretrain_encoder

    for name in config["encoders"]:
        root = Path(config["results"]) / "encoders"
        root.mkdir(parents=True, exist_ok=True)
        pretrain_encoder(config, name, root / f"{name}.pt", root / f"{name}_loss.csv")


# ---- from a shell --------------------------------------------------------------------------------------------


def registered_by(module: str) -> list[str]:
    """The algorithms whose builders ``module`` (or its package's modules) defines."""
    package = module.split(".")[0]
    return [name for name in ALGORITHMS.names()
            if ALGORITHMS[name].__module__ == module or ALGORITHMS[name].__module__.startswith(package + ".")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedbench.extension.contract",
                                     description="Check that an algorithm passes fedbench's algorithm contract.")
    parser.add_argument("target", help="a plugin module (checks every algorithm it registers) or a registered algorithm")
    parser.add_argument("--algorithm", help="only this algorithm of the plugin")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="an entry parameter (VALUE read as YAML), repeatable")
    parser.add_argument("--property", action="append", choices=PROPERTIES, help="only these properties")
    args = parser.parse_args(argv)
    plugins: tuple[str, ...] = ()
    if args.target in ALGORITHMS:
        methods = [args.target]
    else:
        try:
            load_plugins()
            load_plugin(args.target, "named on the command line")
        except PluginError as error:
            print(f"fedbench contract: {error}", file=sys.stderr)
            return 2
        plugins, methods = (args.target,), registered_by(args.target)
    methods = [args.algorithm] if args.algorithm else methods
    if not methods:
        print(f"fedbench contract: {args.target} registers no algorithm", file=sys.stderr)
        return 2
    params = dict(_parameter(text) for text in args.param)
    failed = False
    for method in methods:
        report = check_algorithm(Case(method, params, plugins=plugins), properties=args.property or PROPERTIES)
        print("\n".join(report.lines()))
        failed |= bool(report.failures)
    print("contract: " + ("FAILED" if failed else f"passed ({', '.join(methods)})"))
    return 1 if failed else 0


def _parameter(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"--param {text!r}: write KEY=VALUE")
    return key, yaml.safe_load(value)


if __name__ == "__main__":
    sys.exit(main())

"""What a cell trains and scores, counted from its algorithm's declared workload and its shape.

* training: rounds x the clients that train in a round (the sampled ones, ``participation`` x clients,
  or every client: :func:`training_clients`) x the samples each processes in a round (passes x its
  samples, a short last batch at full length where the vectorised engine pads it; or minibatch steps
  x batch: :func:`local_samples`), and the fine-tuning before every evaluation (:func:`evaluation_finetune`);
* evaluation: every ``eval_every`` rounds the test and validation rows, scored by the clients' models
  and by a global model (:func:`scored_rows`: a model several clients hold scores their distinct rows
  once, as the engine does; a global test set counts once); every ``train_eval_every`` rounds the
  training samples; the rows an algorithm scores to choose a model (:func:`choice_samples`);
* frozen levels: each one forward per training and evaluated row, once (their logits are kept).

Each sample costs the model's FLOPs (:mod:`fedbench.cost.model_flops`); the minibatch steps of a round
(:func:`local_steps`) pay the per-step overhead.  The algorithm's declaration is
:class:`fedbench.registry.workload.Workload`."""

from __future__ import annotations

import math

from fedbench.cost.model_flops import model_cost
from fedbench.cost.shape import CellShape
from fedbench.registry.workload import Workload, declared_workload


def sampled_clients(training: dict, shape: CellShape) -> int:
    """The clients a round samples: max(1, round(``participation`` x clients))."""
    return max(1, round(training["participation"] * shape.num_clients))


def training_clients(workload: Workload, training: dict, shape: CellShape) -> float:
    """Clients that train in a round: every client where the workload says so, else ``participation`` x the clients."""
    if workload.every_client_trains:
        return float(shape.num_clients)
    return training["participation"] * shape.num_clients


def effective_batch(training: dict, shape: CellShape) -> int:
    """The batch the engine forms: ``batch_size``, at most the largest client's samples, at least 1."""
    return max(1, min(int(training["batch_size"]), shape.largest_client or int(training["batch_size"])))


def expected_max(values, m: int) -> float:
    """E[max] of ``m`` of ``values`` drawn uniformly without replacement (a round's sampled clients):
    sum over the sorted values v_(k) (k = 1..n) of v_(k) C(k-1, m-1) / C(n, m)."""
    v = sorted(values)
    n = len(v)
    m = min(max(int(m), 1), n)
    log_total = math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1)
    return sum(v[k] * math.exp(math.lgamma(k + 1) - math.lgamma(m) - math.lgamma(k - m + 2) - log_total)
               for k in range(m - 1, n))


def counted_steps(workload: Workload) -> int:
    """Minibatches one training client computes gradients on in a round of a step-counted algorithm
    (``local_steps`` x ``batches_per_step``); 0 for one counted in passes."""
    return workload.local_steps * workload.batches_per_step


def local_samples(workload: Workload, training: dict, shape: CellShape, padded: bool = False) -> float:
    """Training samples one training client processes per round (forward + backward each):
    :func:`counted_steps` x the batch (at most the mean client's samples) for a step-counted algorithm,
    else the workload's passes x the mean client's samples.  ``padded``: the vectorised engine's
    rows, where a short last batch is computed at full length and masked (models without BatchNorm):
    the mean over the clients of ceil(n / batch) x batch (with the partition's client sizes; the
    mean client's samples without them)."""
    mean_client = shape.train_samples / max(shape.num_clients, 1)
    steps = counted_steps(workload)
    if steps:
        return steps * max(1, min(training["batch_size"], int(mean_client)))
    if padded and shape.client_sizes:
        batch = effective_batch(training, shape)
        mean_client = sum(-(-n // batch) * batch for n in shape.client_sizes) / len(shape.client_sizes)
    return float(workload.local_passes) * mean_client


def local_steps(workload: Workload, training: dict, shape: CellShape) -> float:
    """Minibatch steps of one round in the vectorised engine, where the round's training clients
    step together: a step-counted algorithm's :func:`counted_steps`; else the workload's passes x the
    batches per epoch of the round's largest client, ceil(n / batch), in expectation over the clients
    that train in a round (every client, or the :func:`sampled_clients`: :func:`expected_max` over the
    partition's client sizes; without them, the mean client's batches).  The engine's chunks (the
    hand-written MLP step on the CPU splits clients whose parameters pass 8 MiB) and BatchNorm's
    sub-steps for short batches are not counted."""
    steps = counted_steps(workload)
    if steps:
        return float(steps)
    batch = effective_batch(training, shape)
    if shape.client_sizes:
        trained = shape.num_clients if workload.every_client_trains else sampled_clients(training, shape)
        batches = expected_max([-(-n // batch) for n in shape.client_sizes], trained)
    else:
        batches = math.ceil(shape.train_samples / max(shape.num_clients, 1) / batch)
    return float(workload.local_passes) * batches


def evaluations(training: dict) -> int:
    """Evaluated rounds: every ``eval_every``-th and the last."""
    return math.ceil(training["rounds"] / training["eval_every"])


def evaluation_finetune(workload: Workload, training: dict, shape: CellShape, padded: bool = False) -> tuple[float, float]:
    """(training samples, minibatch steps) of a run's fine-tuning before every evaluation (the workload's
    ``evaluation_finetune_epochs``): evaluations x every client x those epochs x its samples (padded where
    :func:`local_samples` pads), and evaluations x those epochs x the largest client's batches (all clients
    step together)."""
    epochs = workload.evaluation_finetune_epochs
    if not epochs:
        return 0.0, 0.0
    batch = effective_batch(training, shape)
    sizes = shape.client_sizes or (shape.train_samples / max(shape.num_clients, 1),) * max(shape.num_clients, 1)
    per_client = sum((-(-n // batch) * batch if padded and shape.client_sizes else n) for n in sizes) / len(sizes)
    batches = max(math.ceil(n / batch) for n in sizes)
    runs = evaluations(training)
    return runs * shape.num_clients * epochs * per_client, runs * epochs * batches


def scored_models(algorithm: dict, training: dict, workload: Workload | None = None) -> str:
    """What the clients are scored with (:attr:`fedbench.algorithms.base.Algorithm.scored_models`): ``global``,
    ``cluster`` or ``client``; one model each where the algorithm fine-tunes it per client before evaluation,
    BatchNorm stays local, or its workload says every client ends with its own (``own_models``); ``client`` for a
    method the registry does not know (a plugin not loaded).  ``workload``: the algorithm's declaration where
    the caller has read it (:func:`cell_work`), else read here."""
    from fedbench.registry.algorithms import algorithm_class

    try:
        cls = algorithm_class(algorithm["method"])
    except KeyError:
        return "client"
    workload = workload or declared_workload(algorithm, training)
    local_bn = cls.keeps_local_bn and training.get("bn_aggregation", "average") != "average"
    return "client" if workload.evaluation_finetune_epochs or local_bn or workload.own_models else cls.scored_models


def scored_rows(scored: str, shape: CellShape) -> float:
    """Test and validation rows one evaluation scores when the clients are scored with ``scored`` models
    (:func:`scored_models`): the clients' models on their rows (a model several clients hold once over their
    distinct rows, :func:`fedbench.engine.evaluate.evaluate_clients`: one global model or one per cluster scores
    ``shared_eval_samples`` where clusters share a test set), then the global model on the union of the rows
    (counted for every method; a method without one is charged it)."""
    shared = shape.eval_samples if shape.shared_eval_samples is None else shape.shared_eval_samples
    return (shape.eval_samples if scored == "client" else shared) + shared


def choice_samples(workload: Workload, training: dict, shape: CellShape) -> float:
    """Rows scored to choose a model, beyond training and evaluation: in each of the workload's
    ``choice_rounds``, its ``choice_models`` models' loss on every sampled client's training rows --
    rounds x sampled clients x their mean rows x models."""
    if not workload.choice_models:
        return 0.0
    return (workload.choice_rounds * sampled_clients(training, shape) * shape.train_samples / max(shape.num_clients, 1)
            * workload.choice_models)


def cell_work(spec: dict, shape: CellShape, workload: Workload | None = None) -> tuple[float, float]:
    """(training FLOPs, evaluation FLOPs) of a whole run; ``spec`` as :func:`fedbench.config.cells.resolve_cell` gives it.
    Training: rounds x :func:`training_clients` x :func:`local_samples` (the vectorised engine's padded
    batches for a model without BatchNorm), and the fine-tuning before every evaluation
    (:func:`evaluation_finetune`).  A model of several levels (FeMAM) trains and scores its
    newest level; each level it freezes runs one forward per training and evaluated row, once (its
    logits are kept).  Evaluation adds the rows an algorithm scores to choose a model (:func:`choice_samples`).
    ``workload``: the algorithm's declaration where the caller has read it, else read here."""
    training = spec["training"]
    workload = workload or declared_workload(spec["algorithm"], training)
    cost = model_cost(spec["model"], shape.input_shape, shape.num_classes)
    rounds = training["rounds"]
    frozen = workload.frozen_levels
    padded = training.get("engine", "vectorised") == "vectorised" and not cost.batchnorm
    samples = local_samples(workload, training, shape, padded)
    trained = rounds * training_clients(workload, training, shape) * samples
    trained += evaluation_finetune(workload, training, shape, padded)[0]
    scored_rounds = evaluations(training)
    train_evaluations = math.ceil(rounds / training["train_eval_every"]) if training.get("train_eval_every") else scored_rounds
    scored = scored_rounds * scored_rows(scored_models(spec["algorithm"], training, workload), shape) + train_evaluations * shape.train_samples
    chosen = choice_samples(workload, training, shape)
    return (trained * cost.train_flops + frozen * shape.train_samples * cost.eval_flops,
            (scored + chosen + frozen * (shape.eval_samples + shape.train_samples)) * cost.eval_flops)

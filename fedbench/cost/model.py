"""What one training cell costs: its FLOPs, its run time on a device, its host memory.

A cell's work is counted, not guessed: the model's FLOPs per sample come from
``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device (forward + backward for
training, forward for evaluation), and the samples it processes from the cell:

* training: rounds x the clients that train in a round (the sampled ones, ``participation`` x
  clients; all of them for pFedMe and pFedMT: :func:`training_clients`) x the samples each
  processes in a round (epochs x its samples, times the models it trains, a short last batch at
  full length where the vectorised engine pads it; or minibatch steps x batch: :func:`local_samples`);
* evaluation: every ``eval_every`` rounds the test and validation rows, scored by the clients' models
  and by a global model (:func:`scored_rows`: a model several clients hold scores their distinct rows
  once, as the engine does; a global test set counts once); every ``train_eval_every`` rounds the training samples; the rows
  an algorithm scores to choose a model (IFCA: every cluster model on the sampled clients' training
  rows, :func:`choice_samples`);
* FLT's one-off relatedness step: its embeddings and fine-tuning per training image, at measured
  seconds per image (:func:`relatedness_seconds`), and the authors' in-place server average every
  round at its measured FLOP/s (:func:`server_average_seconds`); the clustering of FLT, PCA+kM+HC and
  FedSEM as FLT's code (k-means, PCA, UMAP) at measured seconds per row or entry
  (:func:`clustering_seconds`); the simultaneous average is not counted.

Time = FLOPs / the measured throughput (FLOP/s) of the model's family on the device at the
cell's input resolution (:func:`family_rate`) and numerics setting (precision, layout, compilation:
:func:`setting_rate`), from ``config/throughputs.yaml``
(``benchmarks/throughputs.py`` refreshes it), plus the fixed costs FLOPs do not count
(:data:`OVERHEADS`): per job (start-up, loading), per round, per local minibatch step (the
vectorised engine steps a round's clients together: one client's steps, :func:`local_steps`) and
per evaluated round; ``python -m fedbench.planning.cost_report --fit`` fits them to finished runs.  A job
requests ``safety_factor`` x that.  FeMAM trains only its newest level in a round; its frozen levels'
forward passes count once per row (:func:`frozen_levels`).  Under ``device: auto`` with a GPU, :func:`choose_device`
sends a cell to the CPU where it is estimated faster there.  Where the file has no measured figure for
a family on a device, the device's ``assumed`` throughput stands in and the estimate is
reported as uncalibrated.

The cell's shape (clients, samples, input shape) comes from its partition's summary once it
exists, else is estimated from the dataset's registered facts (:func:`estimated_shape`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from fedbench.engine.numerics import Numerics
from fedbench.cost.memory import cell_job_mb
from fedbench.cost.workload import CellShape, model_cost

THROUGHPUTS = Path(__file__).resolve().parents[2] / "config" / "throughputs.yaml"

# model architecture -> the family whose measured throughput it uses (the benchmark's families)
# (LeNet-5, FedMR's and FLT's CNNCifar, is a family of its own: its 6- and 16-channel convolutions run at
# about half the FedAvg CNN's FLOP/s on the CPU; so is FeMAM's analogues' small CNN, 8 and 16 channels)
FAMILIES = {
    "mlr": "mlp", "mlp": "mlp", "mlp_dropout": "mlp",
    "fedavg_cnn": "fedavg_cnn", "pfedme_cnn": "fedavg_cnn", "convae": "fedavg_cnn",
    "small_cnn": "small_cnn",
    "lenet_cifar": "lenet", "fedmr_cnn": "lenet",
    "leaf_cnn": "leaf_cnn", "fedmr_femnist_cnn": "leaf_cnn",
    "resnet9": "resnet9", "resnet20": "resnet20", "vgg16": "vgg16", "fedmr_vgg16_mnist": "vgg16",
}
FEMNIST_SAMPLES_PER_WRITER = 227  # LEAF FEMNIST: 805,263 samples of 3,550 writers (35 shards)
FEMNIST_WRITERS_PER_SHARD = 3550 / 35
GLOBAL_TEST_SHARE = 1 / 6  # an official test set (MNIST, CIFAR: 10,000 of 60,000-70,000)
SYNTHETIC_SAMPLES_PER_USER = 2265  # pFedMe's Synthetic: (E[floor(lognormal(4, 2))] + 50) x 5


# ---- the cell's shape -----------------------------------------------------------------------


def summary_shape(summary: dict) -> CellShape:
    """The shape recorded in a partition's summary ``.json`` (a global test set, which every client
    lists, counts once: a model shared by the clients scores each distinct row once; where the clients
    of a cluster share one test set, ``shared_eval_samples`` counts each cluster's once)."""
    sizes = summary["train_client_sizes"]
    test = summary.get("test_samples", 0)
    val = summary.get("val_samples", 0)
    shared = None
    if summary.get("spec", {}).get("test_set") == "global":
        test //= max(summary["num_clients"], 1)
    elif "test" in summary.get("shared_parts", ()) and summary.get("groups", {}).get("cluster") and summary.get("test_client_sizes"):
        per_cluster: dict = {}  # each cluster's shared test set once (its first member's size)
        for cluster, size in zip(summary["groups"]["cluster"], summary["test_client_sizes"]):
            per_cluster.setdefault(cluster, size)
        shared = sum(per_cluster.values()) + val
    evaluated = test + val
    return CellShape(
        num_clients=summary["num_clients"], train_samples=sum(sizes), eval_samples=evaluated,
        largest_client=max(sizes, default=0), input_shape=tuple(summary["input_shape"]),
        num_classes=summary["num_classes"], dataset_samples=sum(sizes) + (evaluated if shared is None else shared),
        client_sizes=tuple(sizes), shared_eval_samples=shared,
    )


def estimated_shape(dataset: dict, partition: dict) -> CellShape:
    """The shape of a partition before it exists: clients from the partition entry (or its
    partitioner's default, or the dataset's users), samples from the dataset's registered facts
    (FEMNIST and Synthetic, whose sizes depend on files or draws: their typical sizes per user), split
    as the partition splits them: its registered ``sizes`` where it splits the data itself (FeMAM's
    partitions: the official test set, validation from the training samples), else ``test_fraction``
    of the samples and ``val_fraction`` of the rest; ``sample_fraction`` scales the data down."""
    from fedbench.data import DATASETS, PARTITIONERS
    from fedbench.data.partition import COMMON_KEYS
    from fedbench.data.sources import COMMON_KEYS as DATASET_KEYS

    source = dataset["source"]
    params = DATASETS.with_defaults(source, {k: v for k, v in dataset.items() if k not in DATASET_KEYS})
    facts = DATASETS.extra(source, "facts")(params)
    kind_params = PARTITIONERS.with_defaults(partition["kind"], {k: v for k, v in partition.items() if k not in COMMON_KEYS})
    clients = kind_params.get("num_clients") or kind_params.get("num_users") or facts.num_users
    samples = facts.num_samples
    if samples is None and source == "femnist":
        writers = facts.num_users or FEMNIST_WRITERS_PER_SHARD * len(params.get("shards") or range(35))
        samples, clients = int(writers * FEMNIST_SAMPLES_PER_WRITER), clients or int(writers)
    elif samples is None:
        samples = (facts.num_users or clients or 1) * SYNTHETIC_SAMPLES_PER_USER
    if kind_params.get("samples_per_client") and clients:
        samples = min(samples, clients * kind_params["samples_per_client"])
    clients = int(clients or 1)
    sizes = PARTITIONERS.extra(partition["kind"], "sizes")
    sizes = sizes(kind_params, facts) if sizes else None
    if sizes:  # a partition that splits the data itself (FeMAM's: official test set, validation from training)
        train, val, test = sizes
        samples = train + val + test
    else:  # the generic split: test_fraction of each client's samples, then val_fraction of the rest
        samples = int(samples * kind_params.get("sample_fraction", 1.0))
        test_share = partition.get("test_fraction", 0.25)
        if partition.get("test_set") == "global":
            test_share = facts.test_samples / (facts.num_samples or samples) if facts.test_samples else GLOBAL_TEST_SHARE
        train = int(samples * (1 - test_share) * (1 - partition.get("val_fraction", 0.0)))
    return CellShape(
        num_clients=clients, train_samples=train, eval_samples=samples - train,
        largest_client=max(1, 2 * train // clients),  # a skewed partition's largest client: twice the mean
        input_shape=tuple(facts.input_shape or (1,)), num_classes=facts.num_classes,
        dataset_samples=samples, estimated=True,
    )


# ---- the cell's work, time and memory -------------------------------------------------------


def algorithm_settings(algorithm: dict) -> dict:
    """The algorithm entry with its builder's defaults filled in (pFedMe's ``inner_steps`` 5 and
    ``local_steps`` 20 where the entry leaves them out); an unknown method (a plugin not loaded) as given."""
    from fedbench.registry.algorithms import ALGORITHMS

    params = {k: v for k, v in algorithm.items() if k != "method"}
    try:
        params = ALGORITHMS.with_defaults(algorithm["method"], params)
    except KeyError:
        pass
    return {"method": algorithm["method"], **params}


def femam_schedule(algorithm: dict, rounds: int) -> list[int]:
    """Rounds each FeMAM level trains in the earliest schedule its convergence test allows: the first
    level until round max(``init_rounds``, ``window``), every later one ``window`` rounds (the test
    needs ``window`` rounds of the level, :func:`fedbench.algorithms.femam_rules.converged`), the last
    level the rest.  Exact when the test fires as soon as it may (the offline analogues' huge
    ``threshold``); otherwise levels come later, so the frozen levels' forwards are an upper bound."""
    params = algorithm_settings(algorithm)
    levels = len(params.get("structure") or [None] * 5)
    first = max(params.get("init_rounds", 400), params.get("window", 50))
    ends = [min(first + level * params.get("window", 50), rounds) for level in range(levels - 1)] + [rounds]
    return [end - start for start, end in zip([0, *ends[:-1]], ends)]


def frozen_levels(algorithm: dict, rounds: int) -> int:
    """Levels FeMAM freezes within ``rounds`` (every level of :func:`femam_schedule` that trains, but the
    last); 0 for every other algorithm.  A frozen level's logits are computed once per row and kept
    (:mod:`fedbench.engine.frozen_levels`: the training table and ``LevelLogits`` in evaluation), so it
    costs one forward per row once, not one per sample and round."""
    if algorithm["method"] != "femam" or rounds < 1:
        return 0
    return max(0, sum(n > 0 for n in femam_schedule(algorithm, rounds)) - 1)


def local_passes(algorithm: dict, training: dict) -> float:
    """Epochs one participating client runs per round over its training set: ``local_epochs``,
    times the models it trains (Ditto: global and personal; FedRep: head then body epochs).
    FeMAM trains only its newest level each round (the earlier ones are frozen: their forward is
    counted by :func:`frozen_levels`, not as training)."""
    method = algorithm["method"]
    epochs = training["local_epochs"]
    if method == "fedrep":
        epochs = algorithm.get("head_epochs", 1) + algorithm.get("body_epochs", epochs)
    if method == "ditto":
        epochs *= 2
    return float(epochs)


# minibatch gradient steps per local step of the step-counted algorithms (Per-FedAvg: two batches a step)
STEPS_PER_LOCAL_STEP = {"perfedavg": 2}
# algorithms whose every round trains every client (the sampled ones only aggregate): pFedMe (its
# personal models, Alg. 1), pFedMT (every device of every team)
TRAINS_EVERY_CLIENT = {"pfedme", "pfedmt"}


def training_clients(algorithm: dict, training: dict, shape: CellShape) -> float:
    """Clients that train in a round: all of them for :data:`TRAINS_EVERY_CLIENT`, else ``participation`` x the clients."""
    if algorithm["method"] in TRAINS_EVERY_CLIENT:
        return float(shape.num_clients)
    return training["participation"] * shape.num_clients


def counted_steps(algorithm: dict) -> int:
    """Minibatch steps a client takes in a round of a step-counted algorithm: ``local_steps`` x
    ``inner_steps`` (pFedMe, 20 x 5 by default; FedAvg as pFedMe runs it: ``local_steps``), x 2 for
    Per-FedAvg, ``team_iterations`` x ``local_iterations`` (pFedMT); 0 for an algorithm counted in
    epochs.  ``algorithm`` with its defaults filled in (:func:`algorithm_settings`)."""
    steps = (algorithm.get("local_steps") or 0) * (algorithm.get("inner_steps") or 1)
    steps *= STEPS_PER_LOCAL_STEP.get(algorithm["method"], 1)
    return steps or (algorithm.get("team_iterations") or 0) * (algorithm.get("local_iterations") or 0)


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


def local_samples(algorithm: dict, training: dict, shape: CellShape, padded: bool = False) -> float:
    """Training samples one training client processes per round (forward + backward each):
    minibatch steps x the effective batch for the step-counted algorithms (:func:`counted_steps`),
    else :func:`local_passes` x the mean client's samples.  ``padded``: the vectorised engine's
    rows, where a short last batch is computed at full length and masked (models without BatchNorm):
    the mean over the clients of ceil(n / batch) x batch (with the partition's client sizes; the
    mean client's samples without them).  The algorithm's defaults count where the entry leaves a setting out."""
    algorithm = algorithm_settings(algorithm)
    mean_client = shape.train_samples / max(shape.num_clients, 1)
    steps = counted_steps(algorithm)
    if steps:
        return steps * max(1, min(training["batch_size"], int(mean_client)))
    if padded and shape.client_sizes:
        batch = effective_batch(training, shape)
        mean_client = sum(-(-n // batch) * batch for n in shape.client_sizes) / len(shape.client_sizes)
    return local_passes(algorithm, training) * mean_client


def local_steps(algorithm: dict, training: dict, shape: CellShape) -> float:
    """Minibatch steps of one round in the vectorised engine, where the round's training clients
    step together: a step-counted algorithm's :func:`counted_steps`; else :func:`local_passes` x the
    batches per epoch of the round's largest client, ceil(n / batch), in expectation over the
    ``max(1, round(participation x clients))`` clients a round samples (:func:`expected_max` over the
    partition's client sizes; without them, the mean client's batches).  The engine's chunks (the
    hand-written MLP step on the CPU splits clients whose parameters pass 8 MiB) and BatchNorm's
    sub-steps for short batches are not counted."""
    algorithm = algorithm_settings(algorithm)
    steps = counted_steps(algorithm)
    if steps:
        return float(steps)
    batch = effective_batch(training, shape)
    if shape.client_sizes:
        if algorithm["method"] in TRAINS_EVERY_CLIENT:
            sampled = shape.num_clients
        else:
            sampled = max(1, round(training["participation"] * shape.num_clients))
        batches = expected_max([-(-n // batch) for n in shape.client_sizes], sampled)
    else:
        batches = math.ceil(shape.train_samples / max(shape.num_clients, 1) / batch)
    return local_passes(algorithm, training) * batches


def evaluations(training: dict) -> int:
    """Evaluated rounds: every ``eval_every``-th and the last (:func:`fedbench.run.stages.due`)."""
    return math.ceil(training["rounds"] / training["eval_every"])


# the "+" variants (FeMAM Sec. 5.1): at every evaluation each client fine-tunes its model for
# ``finetune_epochs`` local epochs on a copy before it is scored (Federation.finetune)
FINETUNES_AT_EVALUATION = {"fedavg_plus", "fesem_plus"}


def evaluation_finetune_epochs(algorithm: dict) -> int:
    """Epochs every client fine-tunes at each evaluation: ``finetune_epochs`` of the "+" variants, else 0."""
    algorithm = algorithm_settings(algorithm)
    return int(algorithm.get("finetune_epochs") or 0) if algorithm["method"] in FINETUNES_AT_EVALUATION else 0


def scored_models(algorithm: dict, training: dict) -> str:
    """What the clients are scored with (:attr:`fedbench.algorithms.base.Algorithm.scored_models`): ``global``,
    ``cluster`` or ``client``; one model each where the "+" variants fine-tune it per client, BatchNorm
    stays local, or FLT's averages leave every client its own (:func:`own_models`); ``client`` for a method
    the registry does not know (a plugin not loaded)."""
    from fedbench.registry.algorithms import algorithm_class

    try:
        cls = algorithm_class(algorithm["method"])
    except KeyError:
        return "client"
    local_bn = cls.keeps_local_bn and training.get("bn_aggregation", "average") != "average"
    return "client" if evaluation_finetune_epochs(algorithm) or local_bn or own_models(algorithm) else cls.scored_models


def own_models(algorithm: dict) -> bool:
    """Whether every client holds a model of its own at evaluation though its method averages per cluster: the
    authors' in-place average (:func:`in_place_average`: a client averages models its predecessors already
    replaced, so no two agree, inside a cluster too), or FLT's case I (``clusters: null``: each client averages
    its own neighbours under Ã, so two clients share a model only where their rows of Ã agree, a graph of
    disjoint cliques, which no plan can know: counted per client, an upper bound)."""
    settings = algorithm_settings(algorithm)
    return in_place_average(settings) or (settings["method"] in ("flt", "pca_km_hc") and settings.get("clusters") is None)


def scored_rows(algorithm: dict, training: dict, shape: CellShape) -> float:
    """Test and validation rows one evaluation scores: the clients' models on their rows (a model several
    clients hold once over their distinct rows, :func:`fedbench.engine.evaluate.evaluate_clients`: one
    global model or one per cluster scores ``shared_eval_samples`` where clusters share a test set), then the
    global model on the union of the rows (counted for every method; a method without one is charged it)."""
    shared = shape.eval_samples if shape.shared_eval_samples is None else shape.shared_eval_samples
    return (shape.eval_samples if scored_models(algorithm, training) == "client" else shared) + shared


def evaluation_finetune(algorithm: dict, training: dict, shape: CellShape, padded: bool = False) -> tuple[float, float]:
    """(training samples, minibatch steps) of a run's evaluation-time fine-tuning (:data:`FINETUNES_AT_EVALUATION`):
    evaluations x every client x ``finetune_epochs`` x its samples (padded where :func:`local_samples` pads), and
    evaluations x ``finetune_epochs`` x the largest client's batches (all clients step together)."""
    epochs = evaluation_finetune_epochs(algorithm)
    if not epochs:
        return 0.0, 0.0
    batch = effective_batch(training, shape)
    sizes = shape.client_sizes or (shape.train_samples / max(shape.num_clients, 1),) * max(shape.num_clients, 1)
    per_client = sum((-(-n // batch) * batch if padded and shape.client_sizes else n) for n in sizes) / len(sizes)
    batches = max(math.ceil(n / batch) for n in sizes)
    runs = evaluations(training)
    return runs * shape.num_clients * epochs * per_client, runs * epochs * batches


@dataclass(frozen=True)
class CellCost:
    train_flops: float
    eval_flops: float
    family: str
    seconds: float  # estimated run time, before the safety factor
    calibrated: bool  # the family's throughput on the device was measured, at the cell's input size
    mem_mb: int
    throughput: str = ""  # which figure the time rests on (:func:`family_rate`, :func:`setting_rate`)
    flop_seconds: float = 0.0  # the work's share of ``seconds``: train FLOPs / train rate + eval FLOPs / eval rate
    # + FLT's relatedness step, the in-place average and the clustering at their measured rates
    rounds: int = 0
    steps: float = 0.0  # local minibatch steps of the run (:func:`local_steps` x rounds)
    evaluations: int = 0  # evaluated rounds (:func:`evaluations`)

    def counts(self) -> dict[str, float]:
        """How many times each of :data:`OVERHEADS` is paid: once per job, per round, per local step, per evaluation."""
        return {"job_overhead_s": 1.0, "round_overhead_s": float(self.rounds), "step_overhead_s": float(self.steps),
                "eval_overhead_s": float(self.evaluations)}


# the fixed costs FLOPs do not count, in seconds, per device in config/throughputs.yaml (a device's
# entry first, else the file's top level; absent: 0): a job's start-up, a round's bookkeeping, a
# local minibatch step's fixed part (Python, op dispatch: the engine steps all of a round's clients
# together, so a round pays it once per step of one client), an evaluated round's fixed part
OVERHEADS = ("job_overhead_s", "round_overhead_s", "step_overhead_s", "eval_overhead_s")


def overhead(table: dict, device: str, name: str) -> float:
    """The overhead constant ``name`` on ``device``: the device's entry, else the file's top level, else 0."""
    return float(table.get(device, {}).get(name, table.get(name, 0.0)) or 0.0)


def choice_samples(algorithm: dict, training: dict, shape: CellShape) -> float:
    """Rows scored each run to choose a model, beyond training and evaluation: IFCA's (Ghosh et al.,
    Alg. 1 line 4) every cluster model's loss on every sampled client's training rows each round after
    its ``warmup_rounds`` -- rounds x sampled clients x their mean rows x C; 0 for the others."""
    algorithm = algorithm_settings(algorithm)
    if algorithm["method"] != "ifca":
        return 0.0
    rounds = max(0, training["rounds"] - (algorithm.get("warmup_rounds") or 0))
    sampled = max(1, round(training["participation"] * shape.num_clients))
    return rounds * sampled * shape.train_samples / max(shape.num_clients, 1) * algorithm.get("num_clusters", 1)


def relatedness_seconds(spec: dict, shape: CellShape, table: dict, device: str) -> float:
    """FLT's one-off relatedness step (Algorithm 2) with an encoder signature: every client's training
    images embedded, after ``finetune_epochs`` epochs of each client's own fine-tuning (Enc2), at the
    device's measured seconds per image (``flt_relatedness`` in the throughput file:
    ``benchmarks/flt_relatedness.py``; absent: not counted).  Its k-means and UMAP: :func:`clustering_seconds`."""
    algorithm = algorithm_settings(spec["algorithm"])
    rates = table.get(device, {}).get("flt_relatedness")
    if algorithm["method"] != "flt" or not rates:  # PCA+kM+HC (method pca_km_hc) embeds nothing
        return 0.0
    epochs = algorithm.get("finetune_epochs") or 0
    return shape.train_samples * (rates["encode_s"] + epochs * rates["finetune_s"])


# methods whose server averages the clients' models one client after another (the authors' loop, FLT's
# released code): their ``aggregation`` entry and its default
IN_PLACE_AVERAGE = {"flt": "simultaneous", "pca_km_hc": "simultaneous", "fesem_flt": "in_place"}


def in_place_average(algorithm: dict) -> bool:
    """Whether the server averages the clients' models one after another (FLT's released code, ``aggregation:
    in_place``: FLT, FedSEM as FLT's code) rather than all at once."""
    algorithm = algorithm_settings(algorithm)
    default = IN_PLACE_AVERAGE.get(algorithm["method"])
    return default is not None and algorithm.get("aggregation", default) == "in_place"


def server_average_seconds(spec: dict, shape: CellShape, table: dict, device: str) -> float:
    """The in-place server average of FLT's code (``aggregation: in_place``: FLT, FedSEM as FLT's code),
    every round: each of the M clients' rows a float64 product of its M weights with all M models, 2 M^2 P
    multiply-adds over the model's P entries, at the device's measured ``flt_in_place_average_flop_s``
    (``benchmarks/flt_in_place_average.py``; absent: not counted).  The simultaneous average (each
    distinct row of the graph once) is not counted; FedSEM's k-means: :func:`clustering_seconds`."""
    rate = table.get(device, {}).get("flt_in_place_average_flop_s")
    if not rate or not in_place_average(spec["algorithm"]):
        return 0.0
    entries = model_cost(spec["model"], shape.input_shape, shape.num_classes).state_bytes / 4
    return spec["training"]["rounds"] * 2.0 * shape.num_clients**2 * entries / rate


def _restarts(n_init) -> int:
    """k-means restarts of scikit-learn's ``n_init`` (``auto``: one, with k-means++ initialisation)."""
    return 1 if n_init == "auto" else int(n_init)


def clustering_seconds(spec: dict, shape: CellShape, table: dict, device: str) -> float:
    """Seconds of the clustering that the model's FLOPs do not count, at the device's measured ``flt_clustering`` figures
    (``benchmarks/flt_clustering.py``; absent: not counted):

    * FLT (Algorithm 2 lines 10-16): every client's k-means of its embeddings, training rows x k x restarts x
      ``kmeans_s``, and UMAP of the M x k centres, x ``umap_s`` (``k: ground_truth`` is counted at k = 5, the
      most that FLT's scenarios give a planted cluster);
    * PCA+kM+HC: every client's PCA, training rows x ``pca_s``, and its k-means as FLT's;
    * FedSEM as FLT's code: every round's k-means on the M clients' flattened models, rounds x M x the model's
      entries x ``fesem_kmeans_s`` (a warm-started fit; the first round's 20 restarts, about 3 s at FLT's
      MLP and 100 clients, are not counted)."""
    rates = table.get(device, {}).get("flt_clustering")
    algorithm = algorithm_settings(spec["algorithm"])
    method = algorithm["method"]
    if not rates or method not in ("flt", "pca_km_hc", "fesem_flt"):
        return 0.0
    if method == "fesem_flt":
        entries = model_cost(spec["model"], shape.input_shape, shape.num_classes).state_bytes / 4
        return spec["training"]["rounds"] * shape.num_clients * entries * rates["fesem_kmeans_s"]
    k = algorithm["k"] if isinstance(algorithm["k"], int) else 5
    kmeans = shape.train_samples * k * _restarts(algorithm.get("n_init", 10)) * rates["kmeans_s"]  # PCA+kM+HC: 10
    if method == "pca_km_hc":
        return kmeans + shape.train_samples * rates["pca_s"]
    return kmeans + shape.num_clients * k * rates["umap_s"]


def cell_work(spec: dict, shape: CellShape) -> tuple[float, float]:
    """(training FLOPs, evaluation FLOPs) of a whole run; ``spec`` as :func:`fedbench.config.cells.resolve_cell` gives it.
    Training: rounds x :func:`training_clients` x :func:`local_samples` (the vectorised engine's padded
    batches for a model without BatchNorm), and the "+" variants' fine-tuning at every evaluation
    (:func:`evaluation_finetune`).  A model of several levels (FeMAM) trains and scores its
    newest level; each level it freezes (:func:`frozen_levels`) runs one forward per training and
    evaluated row, once (its logits are kept).  Evaluation adds the rows an algorithm scores to choose a
    model (:func:`choice_samples`: IFCA's cluster losses)."""
    training = spec["training"]
    cost = model_cost(spec["model"], shape.input_shape, shape.num_classes)
    rounds = training["rounds"]
    frozen = frozen_levels(spec["algorithm"], rounds)
    padded = training.get("engine", "vectorised") == "vectorised" and not cost.batchnorm
    samples = local_samples(spec["algorithm"], training, shape, padded)
    trained = rounds * training_clients(spec["algorithm"], training, shape) * samples
    trained += evaluation_finetune(spec["algorithm"], training, shape, padded)[0]
    scored_rounds = evaluations(training)
    train_evaluations = math.ceil(rounds / training["train_eval_every"]) if training.get("train_eval_every") else scored_rounds
    scored = scored_rounds * scored_rows(spec["algorithm"], training, shape) + train_evaluations * shape.train_samples
    chosen = choice_samples(spec["algorithm"], training, shape)
    return (trained * cost.train_flops + frozen * shape.train_samples * cost.eval_flops,
            (scored + chosen + frozen * (shape.eval_samples + shape.train_samples)) * cost.eval_flops)


@functools.lru_cache(maxsize=4)
def _load_throughputs(path: str) -> dict:
    return yaml.safe_load(Path(path).read_text())


def throughputs(path: Path | str = THROUGHPUTS) -> dict:
    """The throughput file: ``safety_factor``, ``job_overhead_s`` and per device ``assumed``, the
    :data:`OVERHEADS` and per-family figures."""
    return _load_throughputs(str(path))


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` for a config's ``device`` (``auto``: what this machine would use)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device.startswith("cuda") else "cpu"


# the input each family's figure is measured at when its entry does not say (benchmarks/throughputs.py)
BENCHMARK_INPUTS = {
    "mlp": (784,), "fedavg_cnn": (1, 28, 28), "leaf_cnn": (1, 28, 28), "lenet": (1, 28, 28), "small_cnn": (1, 28, 28),
    "resnet9": (3, 32, 32), "resnet20": (3, 32, 32), "vgg16": (3, 32, 32),
}
# the registry model each family is benchmarked with, where it is not the family's own name
BENCHMARK_ARCHS = {"lenet": "lenet_cifar"}


FLAT_FAMILIES = {"mlp"}  # matrix products on the flattened input: one figure at any input size


def resolution(input_shape) -> str | None:
    """``HxW`` of an image input (``C, H, W``); None for a flat one (its figure holds at any width)."""
    shape = tuple(input_shape)
    return f"{shape[-2]}x{shape[-1]}" if len(shape) >= 3 else None


def family_rate(table: dict, device: str, family: str, input_shape) -> tuple[dict | None, bool, str]:
    """(FLOP/s figures, calibrated, what they are) of ``family`` on ``device`` for inputs of ``input_shape``.

    A convolutional family is measured at an input size (an MLP's figure holds at any: :data:`FLAT_FAMILIES`):
    its entry ``<family>`` at the size its ``input`` names
    (else the benchmark's, :data:`BENCHMARK_INPUTS`), further sizes under ``<family>@<H>x<W>``
    (``benchmarks/throughputs.py --image-size``).  The figure at the cell's resolution is calibrated;
    without one, the figure of the nearest measured resolution stands in, uncalibrated (a kernel's
    FLOP/s changes with the size of its activations: ResNet-9's 32x32 figure is no measurement of 64x64);
    without any figure of the family, None (the device's ``assumed`` throughput)."""
    families = table[device].get("families", {}) or {}
    want = None if family in FLAT_FAMILIES else resolution(input_shape)
    measured = {}
    for key, figures in families.items():
        name, _, size = key.partition("@")
        if name == family:
            measured[size or resolution(figures.get("input") or BENCHMARK_INPUTS.get(family, ())) or ""] = (key, figures)
    if not measured:
        return None, False, f"{device} assumed {table[device]['assumed']:.3g} FLOP/s (no {family} figure)"
    if want is None or want in measured:
        key, figures = measured.get(want) or measured.get("") or next(iter(measured.values()))
        return figures, True, f"{device} {key}" + (f" at {want}" if want and "@" not in key else "")

    def pixels(size: str) -> float:
        h, _, w = size.partition("x")
        return math.log(int(h) * int(w)) if h.isdigit() and w.isdigit() else math.inf

    size = min(measured, key=lambda m: abs(pixels(m) - pixels(want)))
    key, figures = measured[size]
    return figures, False, f"{device} {key} measured at {size or 'another size'}, not {want}"


def setting_rate(figures: dict | None, calibrated: bool, note: str, setting: str) -> tuple[dict | None, bool, str]:
    """A family's figures for the cell's numerics ``setting`` (:attr:`Numerics.label`, ``fp32`` the default).

    A family's ``train`` figure is its ``fp32`` run; the others ``benchmarks/numerics_matrix.py`` measured sit
    under its ``settings`` (``benchmarks/matrix_settings.py`` writes them), each with its own ``train`` rate
    and where it was ``measured``.  Evaluation runs in FP32 under every setting (:mod:`fedbench.engine.numerics`),
    so ``eval`` stays the family's.  A setting without a figure takes ``fp32``'s, uncalibrated."""
    if figures is None or setting == "fp32":
        return figures, calibrated, note
    measured = (figures.get("settings") or {}).get(setting)
    if measured is None:
        return figures, False, f"{note}, fp32's figure (no {setting} figure)"
    return {**figures, "train": measured["train"]}, calibrated, f"{note}, {setting} ({measured['measured']})"


def cell_cost(spec: dict, shape: CellShape, device: str, table: dict | None = None) -> CellCost:
    """Work, estimated seconds (before the safety factor) and host memory of one cell on ``device`` (cpu or cuda).

    seconds = training FLOPs / the family's training rate + evaluation FLOPs / its evaluation rate
    + FLT's relatedness step (:func:`relatedness_seconds`), the in-place average (:func:`server_average_seconds`)
    and the clustering (:func:`clustering_seconds`) + ``job_overhead_s`` + rounds x ``round_overhead_s`` + local steps x ``step_overhead_s``
    + evaluations x ``eval_overhead_s`` (:data:`OVERHEADS`, :func:`overhead`; local steps: rounds x
    :func:`local_steps`, evaluations: :func:`evaluations`)."""
    table = table or throughputs()
    family = FAMILIES.get(spec["model"]["arch"], "fedavg_cnn")
    training = spec["training"]
    figures, calibrated, note = family_rate(table, device, family, shape.input_shape)
    figures, calibrated, note = setting_rate(figures, calibrated, note, Numerics.from_training(training).label)
    rate = figures or {"train": table[device]["assumed"], "eval": table[device]["assumed"]}
    train, evaluate = cell_work(spec, shape)
    flop_seconds = (train / rate["train"] + evaluate / rate["eval"] + relatedness_seconds(spec, shape, table, device)
                    + server_average_seconds(spec, shape, table, device) + clustering_seconds(spec, shape, table, device))
    steps = training["rounds"] * local_steps(spec["algorithm"], training, shape)
    steps += evaluation_finetune(spec["algorithm"], training, shape)[1]
    mem = cell_job_mb(spec["model"], shape, training)
    cost = CellCost(train, evaluate, family, flop_seconds, calibrated, mem, note, flop_seconds, training["rounds"],
                    steps, evaluations(training))
    seconds = flop_seconds + sum(overhead(table, device, name) * n for name, n in cost.counts().items())
    return dataclasses.replace(cost, seconds=seconds)


def choose_device(spec: dict, shape: CellShape, table: dict | None = None) -> tuple[str, str]:
    """(``cpu`` or ``cuda``, why) for a cell under ``device: auto`` on a machine with a GPU: the CPU
    where :func:`cell_cost` estimates it faster there (tiny models, whose rounds are launch- and
    bookkeeping-bound on a GPU), else the GPU.  The reason names both estimates and whether each
    rests on measured throughputs."""
    table = table or throughputs()
    costs = {device: cell_cost(spec, shape, device, table) for device in ("cpu", "cuda")}
    choice = "cpu" if costs["cpu"].seconds < costs["cuda"].seconds else "cuda"

    def said(device: str) -> str:
        cost = costs[device]
        return f"{device} {cost.seconds:,.0f} s ({'calibrated' if cost.calibrated else 'uncalibrated'}: {cost.throughput})"

    verdict = "the CPU is estimated faster" if choice == "cpu" else "the GPU is estimated faster"
    return choice, f"device auto: {verdict}: {said('cpu')} vs {said('cuda')} (fedbench.cost.model.cell_cost)"


def runtime_minutes(cost: CellCost, attempt: int = 1, table: dict | None = None) -> int:
    """The ``runtime`` a job requests: ``safety_factor`` x the estimate, x the attempt (a job
    resubmitted after its time limit resumes from its checkpoint and gets longer)."""
    table = table or throughputs()
    return max(1, math.ceil(table["safety_factor"] * attempt * cost.seconds / 60))

"""What every algorithm sees (:class:`Federation`) and provides (:class:`Algorithm`), plus the
server-side steps they share: client sampling, one round of local SGD, weighted averaging."""

from __future__ import annotations

import difflib
import functools
import inspect
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from fedbench.registry.algorithms import ALGORITHMS, PlanContext, returned_class
from fedbench.registry.workload import Clustering, Workload, sampled_local_epochs  # noqa: F401  (Clustering, Workload: what a plugin declares)
from fedbench.engine.batches import BatchPlan, make_batch_plan
from fedbench.engine.device_gradient import MinibatchGradients, client_buffers
from fedbench.engine.federated_data import FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import FP32, Numerics
from fedbench.engine.streams import client_streams, stream, stream_seed
from fedbench.engine.traffic import Traffic, weights_bytes
from fedbench.engine.trainer import Trainer
from fedbench.engine.weights import Weights, broadcast, parameter_names, rows, weighted_average

if TYPE_CHECKING:
    import pandas as pd

# what of BatchNorm stays with each client at aggregation (``training.bn_aggregation``)
BN_AGGREGATION = {
    "average": "nothing: BatchNorm parameters and running statistics are averaged like every weight "
    "(what FedAvg, FedMR's and FeMAM's code do)",
    "local_stats": "the running statistics (running_mean, running_var, num_batches_tracked) stay local",
    "local": "every BatchNorm parameter and statistic stays local (FedBN, Li et al. 2021, Algorithm 1)",
}


@dataclass
class Federation:
    """The simulated federation of one cell: model template, data, trainer, and the round's randomness.

    Common random numbers (:mod:`fedbench.engine.streams`): the clients sampled in a round, each
    client's batch order and minibatches, the fine-tuning before evaluation and torch's global
    generator (dropout) come from streams keyed by the seed, the round (:meth:`begin_round`), the
    draw's number within the round and the client, so two methods on one seed sample the same
    clients and visit the same batches.  ``generator`` is the method's own stream (initialisations,
    shuffles, noise), which no shared draw touches.  Without :meth:`begin_round` (a caller driving rounds by hand)
    the draws are numbered over the whole run instead of within each round: still distinct and
    reproducible.
    """

    model: nn.Module
    data: FederatedData
    trainer: Trainer  # VectorisedTrainer or ReferenceTrainer
    local: LocalSGD
    participation: float
    generator: torch.Generator
    seed: int
    encoders: Path = Path("results/encoders")  # where pretrained encoders (``{name}.pt``) are read from
    cache: Path | None = None  # where runs keep what others recompute identically (FLT's fine-tuned embeddings); None: nowhere
    teams: np.ndarray | None = None  # team of every client where the partition defines teams (pFedMT's tiers)
    clusters: np.ndarray | None = None  # planted cluster of every client, where the partition has them; read only
    # by readings that use oracle information (FLT's ``k: ground_truth``, the authors' code)
    bn_aggregation: str = "average"  # a key of BN_AGGREGATION
    numerics: Numerics = FP32  # precision, layout, compilation of local training (training settings; the trainer has them too)
    # the clients the last :meth:`sample_clients` drew (None: none drawn since the pipeline reset it
    # before the round); read by the default :meth:`Algorithm.communication`
    sampled: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)
    current_round: int = field(default=0, init=False, repr=False, compare=False)  # what begin_round last started
    # the shared draws of each purpose so far in this round (their number is part of their stream's key)
    draws: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.bn_aggregation not in BN_AGGREGATION:
            raise ValueError(f"bn_aggregation {self.bn_aggregation!r}; valid choices: {', '.join(BN_AGGREGATION)}")

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    @property
    def device(self) -> torch.device:
        return self.data.x.device

    def begin_round(self, round_: int) -> None:
        """Start round ``round_``: the shared draws are numbered from 0 again and torch's global
        generator is set to the round's stream (dropout masks), whatever the last round drew."""
        self.current_round, self.draws = int(round_), {}
        torch.manual_seed(stream_seed(self.seed, "torch", self.current_round))

    def _draw_number(self, purpose: str) -> int:
        number = self.draws.get(purpose, 0)
        self.draws[purpose] = number + 1
        return number

    def shared_stream(self, purpose: str) -> torch.Generator:
        """The next shared stream of ``purpose`` in this round (e.g. ``sample``: the round's clients)."""
        return stream(self.seed, purpose, self.current_round, self._draw_number(purpose))

    def client_streams(self, purpose: str, clients: torch.Tensor) -> list[torch.Generator]:
        """The next shared draw of ``purpose`` in this round, one stream per client of ``clients``
        keyed by its index in the federation (``batches``, ``minibatches``)."""
        return client_streams(self.seed, purpose, (self.current_round, self._draw_number(purpose)), clients.cpu())

    def sample_clients(self) -> torch.Tensor:
        """max(1, round(rho * K)) distinct clients, uniformly at random, in increasing order (the
        round's ``sample`` stream)."""
        m = max(1, round(self.participation * self.num_clients))
        return self.sample_distinct(m)

    def sample_distinct(self, m: int) -> torch.Tensor:
        """``m`` distinct clients, uniformly at random, in increasing order, from the round's
        ``sample`` stream: the first m of one permutation, so that a method sampling m and one
        sampling m' > m share the m' method's first m draws."""
        chosen = torch.randperm(self.num_clients, generator=self.shared_stream("sample"))[:m]
        self.sampled = chosen.sort().values.to(self.device)
        return self.sampled

    def finetune_streams(self, round_: int, clients: torch.Tensor) -> list[torch.Generator]:
        """Each client's ``finetune`` stream of round ``round_``: its draws when it adapts a model before
        evaluation (:meth:`finetune`, Per-FedAvg's step), apart from training's and alike for every method."""
        return client_streams(self.seed, "finetune", (round_,), clients.cpu())

    def batch_plan(self, clients: torch.Tensor, epochs: int, batch_size: int) -> BatchPlan:
        """The batch order of ``clients``'s next local-training pass of this round, each client's
        from its own ``batches`` stream."""
        counts = self.data.train.counts[clients]
        return make_batch_plan(counts, epochs, batch_size, self.client_streams("batches", clients))

    def model_bytes(self, weights: Weights | None = None, stacked: bool = False) -> int:
        """Bytes of one model as the server and a client exchange it: every state-dict entry of
        ``weights`` (default: the model template's) in its own dtype, BatchNorm's running statistics
        included, less the entries ``bn_aggregation`` keeps on the client (:attr:`local_names`), which
        are never sent.  ``stacked``: ``weights`` holds one row per client; one row is counted."""
        weights = self.model.state_dict() if weights is None else weights
        return weights_bytes(weights, self.local_names, stacked=stacked)

    def train_clients(
        self,
        start: Weights,
        clients: torch.Tensor,
        hp: LocalSGD | None = None,
        center: Weights | None = None,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
    ) -> tuple[Weights, torch.Tensor]:
        """Local SGD from stacked ``start`` for ``clients`` (all at once); returns weights and mean losses.
        The batch order: :meth:`batch_plan`'s, or drawn from ``generator`` where one is given."""
        hp = hp or self.local
        if generator is None:
            plan = self.batch_plan(clients, hp.epochs, hp.batch_size)
        else:
            plan = make_batch_plan(self.data.train.counts[clients], hp.epochs, hp.batch_size, generator)
        return self.trainer.train(start, clients, plan, hp, center)

    def minibatch_gradients(self, split: str = "train") -> MinibatchGradients:
        """The per-client minibatch gradient oracle on ``split`` (batch size and L2 weight decay from
        ``local``) of the Moreau-envelope family."""
        index = getattr(self.data, split)
        return MinibatchGradients(self.model, self.data, index, self.local.batch_size, self.local.weight_decay,
                                  numerics=self.numerics)

    def client_buffers(self, single: Weights, n: int) -> Weights:
        """``n`` copies of the buffers of ``single`` (BatchNorm running statistics; none in a model
        without), one per client, for the oracle's forwards to update in place."""
        return client_buffers(self.model, single, n)

    def sgd_steps(self, start: Weights, clients: torch.Tensor, steps: int) -> tuple[Weights, torch.Tensor]:
        """``steps`` plain SGD steps (lr ``local.lr``), one fresh minibatch each, from stacked ``start``
        for ``clients`` -- local work counted in minibatch steps, as the pFedMe/PerMFL code's FedAvg."""
        if self.local.momentum:
            raise ValueError("local work in minibatch steps (local_steps) is plain SGD; set training.momentum to 0")
        oracle = self.minibatch_gradients()
        names = parameter_names(self.model)
        theta = {n: start[n].clone() for n in names}
        buffers = {k: v.clone() for k, v in start.items() if k not in theta}  # each client's own, moved by its forwards
        batches = oracle.draw(steps, clients, self.client_streams("minibatches", clients))
        loss_sum = torch.zeros(len(clients), device=self.device)
        step = oracle.recurring(  # in place on theta, buffers, loss_sum (a CUDA graph on CUDA)
            lambda x, y: oracle.step(theta, (x, y), clients, buffers, lr=self.local.lr, loss_sum=loss_sum), steps)
        with torch.no_grad():
            for s in range(steps):
                step(*batches[s])
        return {**start, **theta, **buffers}, loss_sum / max(steps, 1)

    def finetune(self, models: Weights, epochs: int, round_: int) -> Weights:
        """Every client fine-tunes its row of ``models`` for ``epochs`` local epochs on a copy, each
        client's batches from its ``finetune`` stream of round ``round_`` (the "+" variants: FedAvg+,
        FeSEM+; FeMAM Sec. 5): the same for every method, and apart from training's."""
        if not epochs:
            return models
        everyone = torch.arange(self.num_clients, device=self.device)
        hp = self.with_local(epochs=epochs, prox_mu=0.0)
        tuned, _ = self.train_clients(models, everyone, hp=hp, generator=self.finetune_streams(round_, everyone))
        return tuned

    def average(self, stacked: Weights, clients: torch.Tensor) -> Weights:
        """Sample-weighted average sum_i n_i theta_i / sum_i n_i of the clients' models."""
        return weighted_average(stacked, self.data.train.counts[clients])

    @functools.cached_property
    def local_names(self) -> list[str]:
        """The state entries that ``bn_aggregation`` keeps with each client (none by default)."""
        if self.bn_aggregation == "average":
            return []
        stats = ("running_mean", "running_var", "num_batches_tracked")
        names = []
        for prefix, module in self.model.named_modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                kept = [n for n, _ in module.named_buffers(recurse=False)]
                kept = [n for n in kept if n in stats]
                if self.bn_aggregation == "local":
                    kept += [n for n, _ in module.named_parameters(recurse=False)]
                names += [f"{prefix}.{n}" if prefix else n for n in kept]
        return names

    def local_state(self, initial: Weights) -> Weights | None:
        """Every client's copy of the entries kept local, from ``initial`` (None when nothing is)."""
        return broadcast({k: initial[k] for k in self.local_names}, self.num_clients) if self.local_names else None

    def with_local_state(self, stacked: Weights, clients: torch.Tensor, kept: Weights | None) -> Weights:
        """``stacked`` (one row per client of ``clients``) with those clients' own local entries."""
        return stacked if kept is None else {**stacked, **rows(kept, clients)}

    def keep_local_state(self, kept: Weights | None, trained: Weights, clients: torch.Tensor) -> Weights | None:
        """``kept`` with the rows of ``clients`` taken from their ``trained`` models."""
        if kept is None:
            return None
        out = {k: v.clone() for k, v in kept.items()}
        for k in out:
            out[k][clients] = trained[k]
        return out

    def with_local(self, **changes) -> LocalSGD:
        return replace(self.local, **changes)


class Algorithm:
    """Base of every registered algorithm: plain state in, plain state out.

    Required: ``init`` -> state; ``round`` -> (state, per-client train loss); ``client_models``
    -> the stacked model each client is scored with; ``global_model`` -> the server model or None.

    Optional hooks, declared here once with the default the pipeline uses when an algorithm
    does not override them (:data:`HOOKS`, :data:`TRUTH_HOOKS`; a subclass's public method whose name is close to a
    hook's but not one is refused at registration, so a misspelt hook cannot switch its feature
    off silently).  Capabilities are class attributes: ``ignored_training`` (training settings
    the algorithm never reads -> why; setting one is a config error, except one the entry
    replaces by its own parameter, ``replaced_training``, or sets to the value the algorithm uses
    anyway, ``harmless_training``), ``keeps_local_bn`` (honours ``training.bn_aggregation``) and
    ``scored_models`` (one model for every client, one per cluster, or one each: what evaluation costs).
    What a run of it computes, the cost model reads from the :meth:`workload` it declares.
    Its own cross-entry rules (the plan hook :meth:`check_plan`) are checked when the config is.
    """

    ignored_training: ClassVar[Mapping[str, str]] = MappingProxyType({})
    replaced_training: ClassVar[Mapping[str, str]] = MappingProxyType({})  # ignored setting -> entry parameter
    harmless_training: ClassVar[Mapping[str, Any]] = MappingProxyType({})  # ignored setting -> value used anyway
    keeps_local_bn: ClassVar[bool] = False
    # the models ``client_models`` scores the clients with: "global" (one for every client), "cluster" (one per
    # cluster), "client" (one each); the evaluation scores each distinct model once over its clients' distinct
    # rows, and the cost model counts the rows so (fedbench.cost.work.scored_rows)
    scored_models: ClassVar[str] = "client"

    @classmethod
    def workload(cls, params: Mapping[str, Any], training: Mapping[str, Any]) -> Workload:
        """Declaration, called on the class: what a run with the entry's ``params`` (the builder's
        defaults filled in) and the experiment's ``training`` computes, as the cost model counts it
        (:class:`~fedbench.registry.workload.Workload`: the clients that train in a round and how much, and
        what else the run computes).  Default: FedAvg's (McMahan et al. 2017, Algorithm 1), the round's
        sampled clients, ``local_epochs`` passes each, nothing else.  The contract's ``workload``
        property checks it against the clients and samples the algorithm trains."""
        return sampled_local_epochs(training)

    def check_plan(self, plan: PlanContext) -> str | None:
        """Plan hook: what makes this entry wrong in ``plan`` (its experiment's training, its
        block's partitions), one line starting with ``algorithms.<name>...``; None: nothing."""
        return None

    def ignored_settings(self, plan: PlanContext) -> dict[str, str]:
        """The training settings ``plan``'s experiment sets that this algorithm never reads -> why
        (each a config error): ``ignored_training`` less those the entry replaces or sets harmlessly."""
        ignored = self.ignored_training
        return {
            key: ignored[key]
            for key, value in plan.training_set.items()
            if key in ignored
            and self.replaced_training.get(key) not in plan.entry
            and not (key in self.harmless_training and value == self.harmless_training[key])
        }

    def init(self, fed: Federation, initial: Weights) -> dict:
        raise NotImplementedError

    def round(self, fed: Federation, state: dict, round_: int) -> tuple[dict, torch.Tensor]:
        raise NotImplementedError

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        raise NotImplementedError

    def global_model(self, fed: Federation, state: dict) -> Weights | None:
        raise NotImplementedError

    def scoring_model(self, fed: Federation, state: dict) -> nn.Module | None:
        """The module the client models are evaluated with (FeMAM's additive levels); None: the cell's model."""
        return None

    def clusters(self, fed: Federation, state: dict) -> np.ndarray | None:
        """The recovered cluster of every client, scored against the partition's ground truth with
        ARI and NMI at every evaluated round; None: not a clustering method."""
        return None

    def planted_clusters(self, fed: Federation, state: dict, count: int) -> np.ndarray | None:
        """The recovered clusters with their number set to the planted one, ``count`` (FLT: HC's tree cut
        at C = ``count`` instead of HC's own C), scored as ``ari_planted``; None: the algorithm has no
        such reading (its ``clusters`` are the only ones)."""
        return None

    def adjacency(self, fed: Federation, state: dict) -> np.ndarray | None:
        """A client relatedness graph (FLT), scored for density and cross-group links; None: none."""
        return None

    def diagnostics(self, fed: Federation, state: dict) -> dict[str, float]:
        """Per-round scalars added to the history (CFL's update norms and splits)."""
        return {}

    def level_clusters(self, fed: Federation, state: dict) -> dict[str, np.ndarray] | None:
        """Every level's grouping (FeMAM), scored against every ground-truth grouping; None: no levels."""
        return None

    def summary(self, fed: Federation, state: dict) -> dict | None:
        """Per-run facts for ``metrics.json`` (CFL's split rounds; a ``warning`` key is logged)."""
        return None

    def artifacts(self, fed: Federation, state: dict) -> dict | None:
        """name -> numpy array (saved as ``{name}.npy``), pandas DataFrame (``.csv``) or JSON-able
        dict (``.json``) in the run directory, e.g. the FLT adjacency matrix; None: nothing."""
        return None

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """Traffic hook: the bytes round ``round_`` sent to and from every client
        (:class:`~fedbench.engine.traffic.Traffic`), given the state ``before`` and ``after`` it.
        Default: one model (:meth:`Federation.model_bytes`) down to every client the round sampled
        (:attr:`Federation.sampled`; every client where the round drew none) and one model up from
        each -- FedAvg's messages.  A method that sends more or less overrides it (IFCA: its k models
        down; FLT: the one-off signature; Local: nothing)."""
        clients = torch.arange(fed.num_clients) if fed.sampled is None else fed.sampled
        size = fed.model_bytes()
        return Traffic.to(fed.num_clients, clients, size, size)

    @staticmethod
    def history_note(history: pd.DataFrame) -> str:
        """Result hook, called on the class: a remark on one run's ``history.csv`` for its scorecard
        row (CFL: it never split); "": none."""
        return ""


REQUIRED = ("init", "round", "client_models", "global_model")
HOOKS = ("scoring_model", "clusters", "adjacency", "diagnostics", "level_clusters", "summary", "artifacts")
TRUTH_HOOKS = ("planted_clusters",)  # run hooks called with what the ground truth tells the scoring (the planted C)
PLAN_HOOKS = ("check_plan",)  # called by the config's checks with a PlanContext, not during a run
TRAFFIC_HOOKS = ("communication",)  # called by the pipeline after every round with the state before and after it
RESULT_HOOKS = ("history_note",)  # static or class methods the results layer calls with a run's outputs
DECLARATIONS = ("workload",)  # class methods the cost model calls with an entry's parameters, before any run
CAPABILITIES = ("ignored_training", "replaced_training", "harmless_training", "keeps_local_bn", "ignored_settings")


def check_algorithm_builder(name: str, builder) -> None:
    """Registration check of ``ALGORITHMS``: the builder's return annotation is an :class:`Algorithm`
    subclass that implements every required method and defines no public method whose name is
    close to a hook's without being one (``cluster`` for ``clusters``)."""
    cls = returned_class(builder)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise TypeError(f"algorithm {name!r}: its builder must be annotated to return an Algorithm subclass, not {cls!r}")
    missing = [m for m in REQUIRED if getattr(cls, m) is getattr(Algorithm, m)]
    if missing:
        raise TypeError(f"algorithm {name!r} ({cls.__name__}) does not implement {', '.join(missing)}")
    on_instance = [h for h in RESULT_HOOKS + DECLARATIONS
                   if not isinstance(inspect.getattr_static(cls, h), (staticmethod, classmethod))]
    if on_instance:
        raise TypeError(f"algorithm {name!r} ({cls.__name__}): {', '.join(on_instance)} is called on the class; "
                        "make it a staticmethod or classmethod")
    declared = (set(REQUIRED) | set(HOOKS) | set(TRAFFIC_HOOKS) | set(TRUTH_HOOKS) | set(PLAN_HOOKS) | set(RESULT_HOOKS)
                | set(DECLARATIONS) | set(CAPABILITIES))
    for attribute, value in vars(cls).items():
        if attribute.startswith("_") or attribute in declared or not callable(value) and not isinstance(value, property):
            continue
        near = difflib.get_close_matches(attribute, declared, n=1, cutoff=0.8)
        if near:
            raise TypeError(
                f"algorithm {name!r} ({cls.__name__}) defines {attribute!r}, which is not a hook; "
                f"did you mean {near[0]!r}? hooks: {', '.join(HOOKS + TRAFFIC_HOOKS + TRUTH_HOOKS + PLAN_HOOKS + RESULT_HOOKS)}"
            )


ALGORITHMS.add_check(check_algorithm_builder)  # the registry itself lives below the algorithms

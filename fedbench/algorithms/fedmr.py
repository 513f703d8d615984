"""FedMR — federated learning via layer-wise model recombination (Hu et al., KDD'24, Algorithm 1),
with its two-stage training scheme (Sec. 4.3) and the Indep ablation (Sec. 3, Fig. 1(b)).

* The server keeps m intermediate models (stacked, one row each; m = the number of clients
  sampled per round).  Every round m clients are sampled and intermediate model i is trained
  by the i-th sampled client (Alg. 1 lines 3-7), all at once on the engine.
* The global model is the *uniform* mean of the m trained models (Alg. 1 line 11); it is scored,
  never trained.
* Stage 1 (rounds 1..``first_stage_rounds``): aggregation — every intermediate model restarts
  from the global model (FedAvg with the uniform mean, as the code's stage 1).  Stage 2:
  layer-wise recombination (:mod:`fedbench.algorithms.recombination`): an independent random
  permutation of the m models per layer, or per segment of layers (``partition`` = x of
  Sec. 5.4.2; x = 1 reassigns whole models).
* FedIndep ("Indep", Sec. 3): no aggregation feeding back, no recombination: each model is only
  passed on to a new random client each round (FedMR with x = 1); its global model is the
  paper's "IndepAggr".

Clients are sampled in increasing order (``Federation.sample_clients``); which model a client
receives is random nonetheless, since every unit of every slot is drawn by a uniform permutation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, PlanContext
from fedbench.algorithms.recombination import recombination_units, recombine, segment_of_units
from fedbench.engine.weights import Weights, broadcast, shared, weighted_average


def uniform_average(stacked: Weights) -> Weights:
    """(1/m) sum_i w_i over the stacked axis (FedMR Alg. 1 line 11)."""
    first = next(iter(stacked.values()))
    return weighted_average(stacked, torch.ones(first.shape[0], device=first.device))


def sample_distinct(fed: Federation, count: int | None) -> torch.Tensor:
    """``count`` distinct clients uniformly at random, in increasing order (default: the
    federation's participation)."""
    if count is None:
        return fed.sample_clients()
    if count > fed.num_clients:
        raise ValueError(f"number of intermediate models m = {count} exceeds the number of clients ({fed.num_clients})")
    return fed.sample_distinct(count)  # the round's sample stream, as every method's


@dataclass(frozen=True)
class FedMR(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    first_stage_rounds: int = 0
    partition: float = 0.0
    layer: Literal["module", "entry"] = "module"
    models: int | None = None

    def init(self, fed: Federation, initial: Weights) -> dict:
        m = max(1, round(fed.participation * fed.num_clients)) if self.models is None else self.models
        if m > fed.num_clients:
            raise ValueError(f"number of intermediate models m = {m} exceeds the number of clients ({fed.num_clients})")
        units = recombination_units(fed.model, self.layer)
        return {
            "models": broadcast(initial, m),
            "global": initial,
            "units": units,
            "segments": segment_of_units(len(units), self.partition),
        }

    def round(self, fed: Federation, state: dict, round_: int):
        m = next(iter(state["models"].values())).shape[0]
        chosen = sample_distinct(fed, m if self.models is not None else None)
        if len(chosen) != m:
            raise ValueError(f"FedMR keeps {m} intermediate models but {len(chosen)} clients were sampled")
        trained, loss = fed.train_clients(state["models"], chosen)
        global_ = uniform_average(trained)
        if round_ <= self.first_stage_rounds:  # stage 1: aggregation
            models = broadcast(global_, m)
        else:  # stage 2: layer-wise recombination
            models = recombine(trained, state["units"], state["segments"], fed.generator)
        return {**state, "models": models, "global": global_}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return shared(state["global"], fed.num_clients)

    def check_plan(self, plan: PlanContext) -> str | None:
        """The aggregation stage within the experiment's rounds; at most as many intermediate
        models as every partition of the block has clients."""
        rounds = plan.training["rounds"]
        if self.first_stage_rounds > rounds:
            return f"algorithms.{plan.name}.first_stage_rounds = {self.first_stage_rounds} exceeds the experiment's rounds ({rounds})"
        for partition, clients in plan.clients.items():
            if self.models is not None and self.models > clients:
                return (f"algorithms.{plan.name}.models = {self.models} intermediate models exceed the {clients} "
                        f"clients of partitions.{partition}")
        return None

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


def _check(first_stage_rounds: int, partition: float, models: int | None) -> None:
    if first_stage_rounds < 0:
        raise ValueError(f"first_stage_rounds must be >= 0, got {first_stage_rounds}")
    if not 0.0 <= partition <= 1.0:
        raise ValueError(f"partition (x of FedMR-px) must lie in [0, 1] (0: every layer its own segment), got {partition}")
    if models is not None and models < 1:
        raise ValueError(f"models (number of intermediate models m) must be >= 1, got {models}")


@ALGORITHMS.register("fedmr", search={"momentum": [0.0, 0.5, 0.9]})
def fedmr(
    *,
    first_stage_rounds: int = 0,
    partition: float = 0.0,
    layer: Literal["module", "entry"] = "module",
    models: int | None = None,
) -> FedMR:
    """FedMR (Hu et al. 2024, Alg. 1): ``first_stage_rounds`` aggregation rounds (the paper: 100 for
    ResNet-20 and VGG-16, 0 for the CNN), then layer-wise recombination; ``partition`` = x of
    FedMR-px (0: per layer); ``layer``: ``module`` (a conv/linear layer with its BatchNorm, the
    paper's figure) or ``entry`` (every state-dict tensor separately, the released code);
    ``models``: number of intermediate models m (default: the clients sampled per round)."""
    if layer not in ("module", "entry"):
        raise ValueError(f"layer must be 'module' (paper) or 'entry' (released code), got {layer!r}")
    _check(first_stage_rounds, partition, models)
    return FedMR(first_stage_rounds=first_stage_rounds, partition=partition, layer=layer, models=models)


@ALGORITHMS.register("fedindep")
def fedindep(*, models: int | None = None) -> FedMR:
    """Indep (FedMR Sec. 3): the m models are shuffled whole among clients, never aggregated back;
    scored by their uniform mean ("IndepAggr")."""
    _check(0, 1.0, models)
    return FedMR(first_stage_rounds=0, partition=1.0, models=models)

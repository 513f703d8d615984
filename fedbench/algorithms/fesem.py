"""FeSEM / FedSEM — multi-center FL by stochastic expectation maximisation (Xie, Long, Shen, Zhou,
Wang, Jiang, Zhang, "Multi-center federated learning", arXiv 2005.01026 / 2108.08647).

The objective (Xie et al., Eq. 4) is k-means in parameter space,
min sum_i sum_k r_ik d(W_i, W~_k), solved per round by one SEM step (Alg. 1, FeSEM):

* E-step (cluster assignment, Eq. 7): r_i = argmin_k d(W_i, W~_k), d = ``distance`` between
  flattened model parameters ("l2": Euclidean, the paper's choice; "cosine": 1 - cos);
* M-step (centre update, Eq. 8): W~_k = weighted mean of the members' models (here
  sample-weighted, as FLT's FedSEM aggregation; centres without members keep their weights);
* local update (Eq. 9): each client trains from its centre's model.

Order within a round (as FLT's FedSEM code, which clusters the *locally trained* models): each
sampled client trains from its centre's model — a client sampled for the first time trains its
own local model W_i, still the initial model (training it from the centre nearest to the
initial model instead makes the assignment stick to that centre: tried, it fails to separate
planted groups under partial participation) — then the E-step runs on the trained models, then
the M-step over the round's clients.  With C = 1 every client starts from the single centre,
so this is exactly FedAvg.

Centre initialisation (``init``):

* ``"clients"`` (default): in the first round every client trains from the initial model and
  the C centres are seeded from the round's trained models by k-means++ (Arthur &
  Vassilvitskii 2007; own generator seeded by ``fed.seed``; if there are fewer distinct
  models than C, duplicates are drawn and stay empty);
* ``"random"``: the paper's randomly initialised centres — centre 0 the initial model, centre
  k >= 1 the template re-initialised under seed ``fed.seed * 1000 + k`` (known to be
  initialisation-sensitive, cf. FLT Sec. 2).

``finetune_epochs`` > 0 gives FeSEM+ (FeMAM's baseline: every client fine-tunes its cluster
model for that many epochs before scoring; evaluation-time only, as FedAvg+).
Clients are scored with their cluster's model (never-assigned clients: the nearest centre
to the initial model, i.e. the E-step on its current model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.algorithms.clustered import (
    assignment_frame,
    cluster_average,
    flat,
    fresh_weights,
    stack,
)
from fedbench.engine.weights import Weights, broadcast, shared, put_rows, rows


def distances(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    """[len(a), len(b)] distances between flattened models."""
    if kind == "l2":
        return torch.cdist(a.double(), b.double())
    if kind == "cosine":
        a, b = torch.nn.functional.normalize(a.double(), dim=1), torch.nn.functional.normalize(b.double(), dim=1)
        return 1 - a @ b.T
    raise ValueError(f"FeSEM distance must be 'l2' or 'cosine', not {kind!r}")


@dataclass(frozen=True)
class FeSEM(Algorithm):
    scored_models = "cluster"  # the clients of a cluster are scored with its model
    num_clusters: int = 5
    distance: str = "l2"
    centre_init: str = "clients"
    finetune_epochs: int = 0

    def __post_init__(self):
        if self.centre_init not in ("clients", "random"):
            raise ValueError(f"FeSEM init must be 'clients' or 'random', not {self.centre_init!r}")
        distances(torch.zeros(1, 1), torch.zeros(1, 1), self.distance)  # validates the name

    @classmethod
    def workload(cls, params, training) -> Workload:
        """The sampled clients train E epochs from their centre's model (Xie et al., Algorithm 1, Eq. 9); FeSEM+
        (FeMAM Sec. 5.1): every client fine-tunes ``finetune_epochs`` epochs before each evaluation."""
        return Workload(local_passes=training["local_epochs"], evaluation_finetune_epochs=params["finetune_epochs"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        centres = None
        if self.centre_init == "random":
            centres = stack([initial] + [fresh_weights(fed, fed.seed * 1000 + k) for k in range(1, self.num_clusters)])
        return {"initial": initial, "centres": centres,
                "assign": torch.full((fed.num_clients,), -1, dtype=torch.long), "history": []}

    def _nearest_to_initial(self, fed: Federation, state: dict) -> int:
        d = distances(flat(fed, broadcast(state["initial"], 1)), flat(fed, state["centres"]), self.distance)
        return int(d.argmin())

    def _effective(self, fed: Federation, state: dict) -> torch.Tensor:
        assign = state["assign"].clone()
        if state["centres"] is None:
            return torch.zeros_like(assign)
        assign[assign < 0] = self._nearest_to_initial(fed, state)
        return assign

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        centres = state["centres"]
        if centres is None:
            start = broadcast(state["initial"], len(chosen))
        else:
            start = rows(centres, self._effective(fed, state)[chosen.cpu()].to(fed.device))
            new = (state["assign"][chosen.cpu()] < 0).nonzero().flatten().to(fed.device)
            if self.num_clusters > 1 and len(new):  # newcomers train their own (initial) model
                start = put_rows(start, new, broadcast(state["initial"], len(new)))
        trained, loss = fed.train_clients(start, chosen)
        points = flat(fed, trained)
        if centres is None:  # k-means++ seeding on this round's trained models
            centres = rows(trained, self._seed_centres(fed, points).to(fed.device))
        choice = distances(points, flat(fed, centres), self.distance).argmin(1).to(chosen.device)  # E-step
        centres = cluster_average(fed, centres, trained, chosen, choice)  # M-step
        assign = state["assign"].clone()
        assign[chosen.cpu()] = choice.cpu()
        history = state["history"] + [(round_, chosen.cpu().numpy(), choice.cpu().numpy())]
        return {**state, "centres": centres, "assign": assign, "history": history}, loss

    def _seed_centres(self, fed: Federation, points: torch.Tensor) -> torch.Tensor:
        """k-means++ (Arthur & Vassilvitskii 2007): first centre uniform, then proportional to d^2."""
        g = torch.Generator().manual_seed(fed.seed * 1000 + 1)
        pick = [int(torch.randint(len(points), (1,), generator=g))]
        for _ in range(1, self.num_clusters):
            d2 = distances(points, points[pick], self.distance).min(1).values.clamp_min(0).cpu() ** 2
            if float(d2.sum()) > 0:
                pick.append(int(torch.multinomial(d2 / d2.sum(), 1, generator=g)))
            else:  # fewer distinct models than centres: duplicates (they stay empty)
                pick.append(int(torch.randint(len(points), (1,), generator=g)))
        return torch.tensor(pick)

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        if state["centres"] is None:
            models = shared(state["initial"], fed.num_clients)
        else:
            models = rows(state["centres"], self._effective(fed, state).to(fed.device))
        return fed.finetune(models, self.finetune_epochs, round_)

    def global_model(self, fed: Federation, state: dict) -> None:
        return None

    def clusters(self, fed: Federation, state: dict) -> np.ndarray:
        return self._effective(fed, state).numpy()

    def artifacts(self, fed: Federation, state: dict) -> dict:
        return {"assignments": assignment_frame(state["history"])}


@ALGORITHMS.register("fesem", bounds={"num_clusters": ">= 1", "distance": ("l2", "cosine"), "init": ("clients", "random"), "finetune_epochs": ">= 0"},
                     search={"num_clusters": [2, 3, 4, 5, 6, 8]}, figures=("assignments",))
def fesem(*, num_clusters: int = 5, distance: str = "l2", init: str = "clients", finetune_epochs: int = 0) -> FeSEM:
    """FeSEM (Xie et al., multi-center FL): k-means of client models (E-step) and per-centre
    sample-weighted averaging (M-step) every round; ``finetune_epochs`` > 0 gives FeSEM+."""
    return FeSEM(num_clusters=num_clusters, distance=distance, centre_init=init, finetune_epochs=finetune_epochs)


@ALGORITHMS.register("fesem_plus", search={"num_clusters": [2, 3, 4, 5, 6, 8]})
def fesem_plus(*, num_clusters: int = 5, finetune_epochs: int = 2) -> FeSEM:
    """FeSEM+ (FeMAM's baseline, Sec. 5.1): FeSEM, then every client fine-tunes its cluster's model
    for ``finetune_epochs`` local epochs before it is scored (2 in FeMAM)."""
    if finetune_epochs < 1:
        raise ValueError(f"FeSEM+ needs finetune_epochs >= 1, got {finetune_epochs}")
    return FeSEM(num_clusters=num_clusters, finetune_epochs=finetune_epochs)

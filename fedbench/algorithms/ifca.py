"""IFCA — Iterative Federated Clustering Algorithm (Ghosh, Chung, Yin, Ramchandran, NeurIPS 2020).

Algorithm 1 of the paper, *model averaging* option (Option II), with C cluster models theta_j:

1. the server broadcasts all C models to the sampled clients;
2. client i estimates its cluster j_i = argmin_j F_i(theta_j), F_i = mean cross-entropy on its
   own **training** data (Alg. 1, line "cluster identity estimation");
3. client i runs E epochs of local SGD from theta_{j_i};
4. theta_j <- sum_{i: j_i = j} n_i theta_i / sum n_i (sample-weighted; clusters without
   members this round keep their weights).

Initialisation (the paper draws the C models at random; its FEMNIST runs, as re-run by FLT,
first pre-train with FedAvg — 500 rounds in FLT's fork, ``warmup_rounds`` here):

* ``init="random"``: centre 0 is the run's initial model, centre j >= 1 the model template
  re-initialised (``reset_parameters``) under the seed ``fed.seed * 1000 + j`` (own RNG, the
  federation's sampling stream is untouched, so C = 1 is exactly FedAvg);
* ``init="perturb"``: centre j >= 1 = initial model + N(0, perturb^2) on every float parameter.
* after ``warmup_rounds`` FedAvg rounds all centres start from the FedAvg model, centre j >= 1
  perturbed by N(0, perturb^2) (re-initialising would throw the warm-up away).

Clients score with their last chosen cluster's model; a client never sampled (or sampled only
during warm-up) scores with the cluster it *would* choose (lowest training loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.algorithms.clustered import (
    assignment_frame,
    cluster_average,
    fresh_weights,
    perturbed,
    stack,
)
from fedbench.engine.evaluate import evaluate_clients
from fedbench.engine.traffic import Traffic
from fedbench.engine.weights import (
    Weights,
    broadcast,
    rows,
    shared,
)


@dataclass(frozen=True)
class IFCA(Algorithm):
    scored_models = "cluster"  # the clients of a cluster are scored with its model
    num_clusters: int = 2
    warmup_rounds: int = 0
    centre_init: str = "random"
    perturb: float = 0.01

    def __post_init__(self):
        if self.centre_init not in ("random", "perturb"):
            raise ValueError(f"IFCA init must be 'random' or 'perturb', not {self.centre_init!r}")
        if self.num_clusters < 1:
            raise ValueError("IFCA needs num_clusters >= 1")

    def _centres_from(self, fed: Federation, base: Weights, random: bool) -> Weights:
        models = [base]
        for j in range(1, self.num_clusters):
            seed = fed.seed * 1000 + j
            models.append(fresh_weights(fed, seed) if random else perturbed(base, self.perturb, seed))
        return stack(models)

    @classmethod
    def workload(cls, params, training) -> Workload:
        """The sampled clients train E epochs from their cluster's model; after the ``warmup_rounds`` each first
        scores all C = ``num_clusters`` models on its training rows to choose one (Ghosh et al. 2020,
        Algorithm 1, cluster identity estimation)."""
        return Workload(local_passes=training["local_epochs"], choice_models=params["num_clusters"],
                        choice_rounds=max(0, training["rounds"] - params["warmup_rounds"]))

    def init(self, fed: Federation, initial: Weights) -> dict:
        centres = None if self.warmup_rounds else self._centres_from(fed, initial, self.centre_init == "random")
        return {
            "global": initial, "centres": centres,
            "assign": torch.full((fed.num_clients,), -1, dtype=torch.long), "history": [],
        }

    def train_losses(self, fed: Federation, centres: Weights, clients: torch.Tensor) -> torch.Tensor:
        """[len(clients), C] mean training loss of every centre on every client's train split."""
        model, was_training = fed.model, fed.model.training
        try:
            losses = [
                evaluate_clients(model, broadcast({k: v[j] for k, v in centres.items()}, len(clients)),
                                 fed.data, fed.data.train, clients).loss
                for j in range(self.num_clusters)
            ]
        finally:
            model.train(was_training)
        return torch.from_numpy(np.stack(losses, 1))

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        if round_ <= self.warmup_rounds:  # FedAvg warm-up (weight sharing before clustering)
            trained, loss = fed.train_clients(broadcast(state["global"], len(chosen)), chosen)
            return {**state, "global": fed.average(trained, chosen)}, loss
        centres = state["centres"]
        if centres is None:  # first round after warm-up
            centres = self._centres_from(fed, state["global"], random=False)
        choice = self.train_losses(fed, centres, chosen).argmin(1).to(chosen.device)
        trained, loss = fed.train_clients(rows(centres, choice), chosen)
        assign = state["assign"].clone()
        assign[chosen.cpu()] = choice.cpu()
        history = state["history"] + [(round_, chosen.cpu().numpy(), choice.cpu().numpy())]
        centres = cluster_average(fed, centres, trained, chosen, choice)
        return {**state, "centres": centres, "assign": assign, "history": history}, loss

    def _effective(self, fed: Federation, state: dict) -> torch.Tensor:
        """Each client's last cluster; never-assigned clients get the one with the lowest train loss."""
        assign = state["assign"].clone()
        if state["centres"] is None:
            return torch.zeros_like(assign)
        missing = (assign < 0).nonzero().flatten()
        if len(missing):
            losses = self.train_losses(fed, state["centres"], missing.to(fed.device))
            assign[missing] = losses.argmin(1)
        return assign

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        if state["centres"] is None:
            return shared(state["global"], fed.num_clients)
        return rows(state["centres"], self._effective(fed, state).to(fed.device))

    def global_model(self, fed: Federation, state: dict) -> Weights | None:
        return state["global"] if state["centres"] is None else None

    def clusters(self, fed: Federation, state: dict) -> np.ndarray:
        return self._effective(fed, state).numpy()

    def artifacts(self, fed: Federation, state: dict) -> dict:
        return {"assignments": assignment_frame(state["history"])}

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """Alg. 1: all C cluster models down to every sampled client, its trained model and its
        cluster identity (one int64) up; a warm-up round is FedAvg's (one model each way)."""
        if round_ <= self.warmup_rounds:
            return super().communication(fed, before, after, round_)
        size = fed.model_bytes()
        return Traffic.to(fed.num_clients, fed.sampled, self.num_clusters * size, size + CLUSTER_ID_BYTES)


CLUSTER_ID_BYTES = 8  # the cluster identity a client sends with its model (one int64)


@ALGORITHMS.register("ifca", bounds={"num_clusters": ">= 1", "warmup_rounds": ">= 0", "init": ("random", "perturb"), "perturb": ">= 0"},
                     search={"num_clusters": [2, 3, 4, 5, 6, 8]}, figures=("assignments",))
def ifca(*, num_clusters: int = 2, warmup_rounds: int = 0, init: str = "random", perturb: float = 0.01) -> IFCA:
    """IFCA (Ghosh et al. 2020, Alg. 1, model averaging): clients pick the cluster model with the lowest
    training loss; per-cluster sample-weighted averaging; optional FedAvg warm-up rounds."""
    return IFCA(num_clusters=num_clusters, warmup_rounds=warmup_rounds, centre_init=init, perturb=perturb)

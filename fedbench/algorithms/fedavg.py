"""FedAvg, FedProx and FedAvg+ (FedAvg followed by local fine-tuning).

* FedAvg — McMahan et al. 2017, Algorithm 1: sampled clients run E epochs of local SGD
  from the global model; the server takes the sample-weighted average sum_k n_k/n w_k.
* FedProx — Li et al. 2020, Eq. (2): the local objective adds mu/2 ||w - w^t||^2.
* FedAvg+ — as FeMAM (Sec. 5, baselines) defines it: FedAvg, then every client fine-tunes
  the global model for ``finetune_epochs`` local epochs; clients are scored with the
  fine-tuned models.  Fine-tuning happens at evaluation time on a copy (it never feeds
  back into training) with its own random stream, so ``eval_every`` does not change the run.
* ``local_steps=R`` counts local work in minibatch steps instead of epochs: R plain SGD steps,
  one fresh minibatch each (FedAvg as the pFedMe/PerMFL code runs it, ``useravg.py``).

All three honour ``training.bn_aggregation`` (:data:`~fedbench.algorithms.base.BN_AGGREGATION`):
with ``local`` this family is FedBN (Li et al. 2021, Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.numerics import VMAP_LAYOUT as VMAP
from fedbench.engine.weights import Weights, broadcast, shared
from fedbench.registry.search_space import LogRange


@dataclass(frozen=True)
class FedAvg(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    prox_mu: float = 0.0
    finetune_epochs: int = 0
    local_steps: int | None = None

    keeps_local_bn = True  # honours training.bn_aggregation
    replaced_training = {"local_epochs": "local_steps"}  # an entry setting local_steps counts its work in steps knowingly
    harmless_training = {"momentum": 0.0, "channels_last": False}  # plain steps: momentum 0 is what it does anyway

    @property
    def ignored_training(self) -> dict[str, str]:
        """Training settings this configuration never reads (setting them is a config error)."""
        if self.local_steps is None:
            return {}
        why = f"fedavg with local_steps={self.local_steps} runs that many plain SGD minibatch steps"
        return {"local_epochs": f"{why}, not epochs", "momentum": f"{why}, without momentum",
                "channels_last": f"{why}: its minibatch-gradient oracle {VMAP}"}

    @classmethod
    def workload(cls, params, training) -> Workload:
        """The sampled clients train E = ``local_epochs`` epochs (McMahan et al. 2017, Algorithm 1; FedProx,
        Li et al. 2020, Algorithm 2, the same passes), or ``local_steps`` plain minibatch steps (the pFedMe
        code's FedAvg); FedAvg+ (FeMAM Sec. 5.1): every client fine-tunes ``finetune_epochs`` epochs before
        each evaluation."""
        steps = params.get("local_steps") or 0
        return Workload(local_passes=0.0 if steps else training["local_epochs"], local_steps=steps,
                        evaluation_finetune_epochs=params.get("finetune_epochs", 0))

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial, "local": fed.local_state(initial)}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        start = fed.with_local_state(broadcast(state["global"], len(chosen)), chosen, state["local"])
        hp = fed.with_local(prox_mu=self.prox_mu) if self.prox_mu else None
        if self.local_steps is not None:
            trained, loss = fed.sgd_steps(start, chosen, self.local_steps)
        else:
            trained, loss = fed.train_clients(start, chosen, hp=hp, center=start)
        return {"global": fed.average(trained, chosen), "local": fed.keep_local_state(state["local"], trained, chosen)}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        everyone = torch.arange(fed.num_clients, device=fed.device)
        models = fed.with_local_state(shared(state["global"], fed.num_clients), everyone, state["local"])
        return fed.finetune(models, self.finetune_epochs, round_)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("fedavg", bounds={"local_steps": ">= 1"})
def fedavg(*, local_steps: int | None = None) -> FedAvg:
    """FedAvg (McMahan et al. 2017), sample-weighted aggregation; local work in epochs, or in
    ``local_steps`` minibatch steps (the pFedMe/PerMFL code's FedAvg)."""
    if local_steps is not None and local_steps < 1:
        raise ValueError(f"local_steps must be >= 1, got {local_steps}")
    return FedAvg(local_steps=local_steps)


@ALGORITHMS.register("fedprox", bounds={"mu": ">= 0"}, search={"mu": LogRange(0.001, 1)})
def fedprox(*, mu: float = 0.01) -> FedAvg:
    """FedProx (Li et al. 2020) with proximal coefficient ``mu`` (mu = 0 is FedAvg)."""
    return FedAvg(prox_mu=mu)


@ALGORITHMS.register("fedavg_plus", bounds={"finetune_epochs": ">= 0"}, search={"finetune_epochs": [1, 2, 5]})
def fedavg_plus(*, finetune_epochs: int = 1) -> FedAvg:
    """FedAvg+ (FeMAM's baseline): FedAvg, then each client fine-tunes for ``finetune_epochs`` epochs."""
    return FedAvg(finetune_epochs=finetune_epochs)

"""FedRep — Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for
Personalized Federated Learning" (ICML 2021), Algorithm 1.

The model is a shared body (representation) and a personal head: here the head is the last
Linear layer (its weight and bias), the body everything else.  Each round every sampled client
starts from the global body and its own head, trains the head for ``head_epochs`` epochs with the
body fixed, then the body for ``body_epochs`` epochs with its new head fixed; the server averages
only the bodies (sample-weighted, Eq. 7 of FeMAM's aggregation), each client keeps its head.
Clients are scored with the global body and their own head.  FeMAM (App. C.1) uses 2 + 2 epochs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.algorithms.partial import frozen_copy, train_module, trainer_for
from fedbench.engine.traffic import Traffic, weights_bytes
from fedbench.engine.weights import Weights, broadcast, parameter_names, put_rows, rows


def head_names(fed: Federation) -> list[str]:
    """The head: the template's last two parameters (the last Linear's weight and bias)."""
    return parameter_names(fed.model)[-2:]


@dataclass(frozen=True)
class FedRep(Algorithm):
    head_epochs: int = 2
    body_epochs: int = 2
    _trainers: dict = field(default_factory=dict, compare=False, repr=False)

    def _trainer(self, fed: Federation, part: str):
        """Trainer of the model with the body (``part="head"``) or the head (``"body"``) frozen."""
        key = (id(fed.data), part)
        if key not in self._trainers:  # the entry holds fed.data, so no later object can take its id
            head = head_names(fed)
            frozen = [n for n in parameter_names(fed.model) if n not in head] if part == "head" else head
            self._trainers[key] = (fed.data, trainer_for(fed, frozen_copy(fed.model, frozen).to(fed.device)))
        return self._trainers[key][1]

    @classmethod
    def workload(cls, params, training) -> Workload:
        """Every sampled client trains its head ``head_epochs`` epochs, then the body ``body_epochs`` epochs
        (Collins et al. 2021, Algorithm 1): their sum in passes a round."""
        return Workload(local_passes=params["head_epochs"] + params["body_epochs"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial, "heads": broadcast({k: initial[k] for k in head_names(fed)}, fed.num_clients)}

    def _models(self, state: dict, clients: torch.Tensor, n: int) -> Weights:
        start = broadcast(state["global"], n)
        start.update(rows(state["heads"], clients))
        return start

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        start = self._models(state, chosen, len(chosen))
        after_head, _ = train_module(fed, self._trainer(fed, "head"), start, chosen, fed.with_local(epochs=self.head_epochs))
        trained, loss = train_module(fed, self._trainer(fed, "body"), after_head, chosen, fed.with_local(epochs=self.body_epochs))
        head = head_names(fed)
        body = fed.average({k: v for k, v in trained.items() if k not in head}, chosen)
        heads = put_rows(state["heads"], chosen, {k: trained[k] for k in head})
        return {"global": {**state["global"], **body}, "heads": heads}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        everyone = torch.arange(fed.num_clients, device=fed.device)
        return self._models(state, everyone, fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> None:
        return None

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """The shared body down to every sampled client and back; the personal head never leaves it."""
        size = weights_bytes(fed.model.state_dict(), [*fed.local_names, *head_names(fed)])
        return Traffic.to(fed.num_clients, fed.sampled, size, size)


@ALGORITHMS.register("fedrep", search={"head_epochs": [1, 2, 5]})
def fedrep(*, head_epochs: int = 2, body_epochs: int = 2) -> FedRep:
    """FedRep (Collins et al. 2021): ``head_epochs`` on the personal head, then ``body_epochs`` on the
    shared body; only the body is averaged."""
    if head_epochs < 0 or body_epochs < 0 or head_epochs + body_epochs == 0:
        raise ValueError(f"FedRep needs head_epochs, body_epochs >= 0, not both 0; got {head_epochs}, {body_epochs}")
    return FedRep(head_epochs=head_epochs, body_epochs=body_epochs)

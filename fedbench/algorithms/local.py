"""Local: every client trains its own model and never communicates (the no-federation baseline).

``train_on``: ``train`` (default) trains on the client's training rows only; ``train_val`` on its
training *and* validation rows, as FeMAM's Local ("Each client train with its own training and
validation dataset", FeMAM App. C.1; the FeMAM grid's setting)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.algorithms.partial import trainer_for
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.traffic import Traffic
from fedbench.engine.weights import Weights, broadcast, put_rows, rows

TRAIN_ON = ("train", "train_val")


def with_validation_rows(data: FederatedData) -> FederatedData:
    """``data`` whose every client's training rows are its training rows followed by its validation rows."""
    if data.val is None:
        raise ValueError("Local with train_on: train_val needs per-client validation rows: use a partition "
                         "with val_fraction or val_ratio > 0")
    train, val = data.train, data.val
    lists = [np.concatenate([train.index[k, : int(train.counts[k])].cpu().numpy(), val.index[k, : int(val.counts[k])].cpu().numpy()])
             for k in range(data.num_clients)]
    return replace(data, train=ClientIndex.from_lists(lists, data.x.device))


@dataclass(frozen=True)
class Local(Algorithm):
    train_on: str = "train"
    _trainers: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.train_on not in TRAIN_ON:
            raise ValueError(f"Local train_on must be one of {', '.join(TRAIN_ON)}; got {self.train_on!r}")

    def _training(self, fed: Federation) -> Federation:
        """``fed`` itself, or (``train_val``) ``fed`` with training rows + validation rows and a trainer on them (built once)."""
        if self.train_on == "train":
            return fed
        key = id(fed.data)
        if key not in self._trainers:  # the entry holds fed.data, so no later object can take its id
            data = with_validation_rows(fed.data)
            self._trainers[key] = (fed.data, data, trainer_for(fed, fed.model, data))
        _, data, trainer = self._trainers[key]
        return replace(fed, data=data, trainer=trainer)

    def init(self, fed: Federation, initial: Weights) -> dict:
        self._training(fed)  # a missing validation split is an error before the first round
        return {"clients": broadcast(initial, fed.num_clients)}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        trained, loss = self._training(fed).train_clients(rows(state["clients"], chosen), chosen)
        return {"clients": put_rows(state["clients"], chosen, trained)}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return state["clients"]

    def global_model(self, fed: Federation, state: dict) -> None:
        return None

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """Nothing: every client trains alone."""
        return Traffic.none(fed.num_clients)


@ALGORITHMS.register("local")
def local(*, train_on: Literal["train", "train_val"] = "train") -> Local:
    """Local training only (each client's model on its own data; all start from the same init);
    ``train_on: train_val`` adds the client's validation rows to its training data (FeMAM App. C.1)."""
    return Local(train_on=train_on)

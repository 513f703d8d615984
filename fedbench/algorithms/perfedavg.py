"""Per-FedAvg, first-order (Fallah, Mokhtari & Ozdaglar, NeurIPS 2020, Algorithm 1 with the FO
approximation of Sec. 4).

Every round the sampled clients start from the global model w and run R local rounds; each uses
two fresh minibatches D, D':

  temp  = theta - alpha grad f_i(theta; D)          (inner adaptation step, alpha = ``fed.local.lr``)
  theta <- theta - beta grad f_i(temp; D')          (first-order meta step)

and the server averages the clients' theta (sample-weighted, as ``serverperavg.py``).  BatchNorm's
running statistics move with both forwards of a step on each client's own copy and are averaged
like every weight.

The personalised model (PM) every client is scored with is the global model after one step of
adaptation, computed at evaluation time on a copy with its own random stream:

* ``adaptation="paper"`` (default; Fallah et al. Sec. 3): one alpha-step on a minibatch of the
  client's *training* data;
* ``adaptation="code"`` (pFedMe repository, ``userperavg.train_one_step``): an alpha-step then a
  beta-step, on two minibatches of the client's *test* data (the test data leak into the model
  that is then tested on them; offered to reproduce the published numbers, documented in
  docs/fidelity.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.numerics import VMAP_LAYOUT as VMAP
from fedbench.engine.weights import Weights, broadcast, parameter_names
from fedbench.registry.search_space import Relative

ADAPTATIONS = ("paper", "code")


@dataclass(frozen=True)
class PerFedAvg(Algorithm):
    beta: float = 0.001
    local_steps: int = 20
    adaptation: str = "paper"

    # training settings Per-FedAvg never reads (setting them is a config error)
    ignored_training = {
        "local_epochs": "Per-FedAvg runs local_steps rounds of two minibatch gradient steps, not epochs",
        "momentum": "Per-FedAvg's inner and meta steps are plain gradient steps, without momentum",
        "channels_last": f"Per-FedAvg's minibatch-gradient oracle {VMAP}",
    }
    replaced_training = {"local_epochs": "local_steps"}  # an entry setting local_steps counts its work in steps knowingly
    harmless_training = {"momentum": 0.0, "channels_last": False}  # what it does anyway

    @classmethod
    def workload(cls, params, training) -> Workload:
        """Every sampled client runs ``local_steps`` local steps, each on two fresh minibatches D, D' (Fallah et
        al. 2020, Algorithm 1 with the first-order approximation of Sec. 4)."""
        return Workload(local_steps=params["local_steps"], batches_per_step=2)

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial}

    def round(self, fed: Federation, state: dict, round_: int):
        x = state["global"]
        names = parameter_names(fed.model)
        chosen = fed.sample_clients()
        oracle = fed.minibatch_gradients()
        theta = broadcast({n: x[n] for n in names}, len(chosen))
        buffers = fed.client_buffers(x, len(chosen))  # running statistics: both forwards of a step move them
        batches = oracle.draw(2 * self.local_steps, chosen, fed.client_streams("minibatches", chosen))
        loss_sum = torch.zeros(len(chosen), device=fed.device)
        temp = {n: torch.empty_like(v) for n, v in theta.items()}

        def local_round(x: torch.Tensor, y: torch.Tensor, x_meta: torch.Tensor, y_meta: torch.Tensor) -> None:
            torch._foreach_copy_(list(temp.values()), list(theta.values()))
            oracle.step(temp, (x, y), chosen, buffers, lr=fed.local.lr, loss_sum=loss_sum)  # temp = theta - alpha grad f(theta; D)
            oracle.step(theta, (x_meta, y_meta), chosen, buffers, lr=self.beta, at=temp)  # theta -= beta grad f(temp; D')

        step = oracle.recurring(local_round, self.local_steps)  # in place on theta, temp, buffers, loss_sum
        with torch.no_grad():
            for r in range(self.local_steps):
                step(*batches[2 * r], *batches[2 * r + 1])
        return {"global": {**x, **fed.average({**theta, **buffers}, chosen)}}, loss_sum / max(self.local_steps, 1)

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        """The global model after one step of adaptation on every client (see module docstring)."""
        x = state["global"]
        names = parameter_names(fed.model)
        everyone = torch.arange(fed.num_clients, device=fed.device)
        split, steps = ("train", (fed.local.lr,)) if self.adaptation == "paper" else ("test", (fed.local.lr, self.beta))
        oracle = fed.minibatch_gradients(split=split)
        batches = oracle.draw(len(steps), everyone, fed.finetune_streams(round_, everyone))
        theta = broadcast({n: x[n] for n in names}, fed.num_clients)
        buffers = fed.client_buffers(x, fed.num_clients)
        with torch.no_grad():
            for s, lr in enumerate(steps):
                grads, _ = oracle(theta, batches[s], everyone, buffers)
                torch._foreach_add_(list(theta.values()), [grads[n] for n in names], alpha=-lr)
        return {**broadcast(x, fed.num_clients), **theta, **buffers}

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("perfedavg", bounds={"beta": "> 0", "local_steps": ">= 1", "adaptation": ADAPTATIONS},
                     search={"beta": Relative(0.1, 10)})
def perfedavg(*, beta: float = 0.001, local_steps: int = 20, adaptation: str = "paper") -> PerFedAvg:
    """Per-FedAvg (FO): meta step size ``beta`` (the pFedMe repository's README value), inner step
    ``training.lr``, ``local_steps`` local rounds; ``adaptation`` "paper" (one step on training
    data) or "code" (two steps on test data, the pFedMe repository)."""
    if adaptation not in ADAPTATIONS:
        raise ValueError(f"adaptation must be one of {ADAPTATIONS}, got {adaptation!r}")
    if local_steps < 1:
        raise ValueError(f"local_steps must be >= 1, got {local_steps}")
    return PerFedAvg(beta, local_steps, adaptation)

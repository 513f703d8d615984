"""pFedMe — Personalized FL with Moreau envelopes (Dinh, Tran & Nguyen, NeurIPS 2020, Algorithm 1).

Every round t, every client i starts from the global model, w_i = theta_i = w^t, and runs R
local rounds; each draws ONE minibatch D and approximately solves the personalisation problem
(Eq. 7) with K gradient steps at personal learning rate ``personal_lr``:

  theta_i <- theta_i - personal_lr (grad f_i(theta_i; D) + lam (theta_i - w_i)),

then takes the local step on the Moreau envelope (Eq. 8, lr eta = ``fed.local.lr``):

  w_i <- w_i - eta lam (w_i - theta_i).

theta_i persists across the R local rounds (it is not reset to w_i).  The server samples the
clients S (``participation``) and moves the global model by beta (Eq. 9-10):

  w^{t+1} = (1 - beta) w^t + beta sum_{i in S} n_i / n_S w_i.

As the authors' code (``userpFedMe.py``, ``serverpFedMe.py``) every client trains every round;
sampling only decides whose w_i are averaged.  The global model (GM) is w.  The personalised
model (PM) of client i is, with ``personal_model``:

* ``"theta"`` (default, paper Sec. 3: the personalised model is theta_i): theta_i after the last
  local round;
* ``"local"`` (the released code): the local model w_{i,R}.  ``pFedMeOptimizer.step`` returns the
  model's own Parameters, which ``update_parameters(local_model)`` then overwrites with w_loc, so
  ``test_persionalized_model`` scores w_{i,R} (docs/original_code_notes.md §3.1).

A model with BatchNorm (FeMAM's ResNet-9 grid) trains on batch statistics; every client's
running statistics move with each of its K R forwards (one model per client, as the code's),
its personalised model keeps them, and the server mixes them by Eq. 10 like every weight.

The code's l2 term (mu = 0.001, the "l2-regularised" MLR) enters the personal (theta) step
only, theta <- theta - personal_lr (grad f + lam (theta - w_i) + mu theta); it is ``mu`` here,
not the training settings' ``weight_decay`` (which every method's minibatch oracle would add).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.numerics import VMAP_LAYOUT as VMAP
from fedbench.engine.traffic import Traffic
from fedbench.engine.weights import Weights, broadcast, parameter_names, rows
from fedbench.registry.search_space import Relative

PERSONAL_MODELS = ("theta", "local")


@dataclass(frozen=True)
class PFedMe(Algorithm):
    lam: float = 15.0
    personal_lr: float = 0.09
    inner_steps: int = 5
    local_steps: int = 20
    beta: float = 1.0
    mu: float = 0.0
    personal_model: str = "theta"

    # training settings pFedMe never reads (setting them is a config error)
    ignored_training = {
        "local_epochs": "pFedMe runs local_steps x inner_steps minibatch steps, not epochs",
        "momentum": "pFedMe's personal and Moreau-envelope steps are plain gradient steps, without momentum",
        "channels_last": f"pFedMe's minibatch-gradient oracle {VMAP}",
    }
    replaced_training = {"local_epochs": "local_steps"}  # an entry setting local_steps counts its work in steps knowingly
    harmless_training = {"momentum": 0.0, "channels_last": False}  # what it does anyway

    @classmethod
    def workload(cls, params, training) -> Workload:
        """Every client (not only the sampled ones, as the authors' code) runs R = ``local_steps`` local rounds
        of K = ``inner_steps`` gradient steps on one minibatch each (Dinh et al. 2020, Algorithm 1, Eq. 7-8)."""
        return Workload(every_client_trains=True, local_steps=params["local_steps"] * params["inner_steps"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial, "personal": broadcast(initial, fed.num_clients)}

    def round(self, fed: Federation, state: dict, round_: int):
        x = state["global"]
        names = parameter_names(fed.model)
        everyone = torch.arange(fed.num_clients, device=fed.device)
        oracle = fed.minibatch_gradients()
        w = broadcast({n: x[n] for n in names}, fed.num_clients)
        theta = {n: v.clone() for n, v in w.items()}
        buffers = fed.client_buffers(x, fed.num_clients)  # each client's running statistics, moved by its forwards
        th, wl = list(theta.values()), list(w.values())
        batches = oracle.draw(self.local_steps, everyone, fed.client_streams("minibatches", everyone))
        loss_sum = torch.zeros(fed.num_clients, device=fed.device)
        pull, eta = self.personal_lr * self.lam, fed.local.lr * self.lam

        def local_round(x_r: torch.Tensor, y_r: torch.Tensor) -> None:
            for _ in range(self.inner_steps):
                # theta <- (1 - lr lam - lr mu) theta + lr lam w - lr grad   (Eq. 7 by K gradient steps;
                # the code's mu theta, at theta before it moves)
                oracle.step(theta, (x_r, y_r), everyone, buffers, lr=self.personal_lr, decay=pull + self.personal_lr * self.mu,
                            anchor=w, pull=pull, loss_sum=loss_sum)
            torch._foreach_lerp_(wl, th, eta)  # w <- w - eta lam (w - theta)   (Eq. 8)

        step = oracle.recurring(local_round, self.local_steps)  # in place on theta, w, buffers, loss_sum
        with torch.no_grad():
            for r in range(self.local_steps):
                step(*batches[r])
            chosen = fed.sample_clients()
            average = fed.average(rows({**w, **buffers}, chosen), chosen)
            # Eq. 10, running statistics mixed like every weight (integer counts: the average's maximum)
            new_global = {k: torch.lerp(x[k], v, self.beta) if v.is_floating_point() else v for k, v in average.items()}
        steps = max(self.local_steps * self.inner_steps, 1)
        personal = {**state["personal"], **(theta if self.personal_model == "theta" else w), **buffers}
        return {"global": {**x, **new_global}, "personal": personal}, loss_sum / steps

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return state["personal"]

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """Alg. 1: the global model down to every client (all of them train), the local models of the
        sampled ones up."""
        size = fed.model_bytes()
        everyone = Traffic.to(fed.num_clients, range(fed.num_clients), size, 0)
        return everyone + Traffic.to(fed.num_clients, fed.sampled, 0, size)


@ALGORITHMS.register("pfedme", bounds={"lam": "> 0", "personal_lr": "> 0", "inner_steps": ">= 1", "local_steps": ">= 1", "beta": "> 0"},
                     search={"lam": Relative(0.1, 10), "personal_lr": Relative(0.3, 3)})
def pfedme(
    *,
    lam: float = 15.0,
    personal_lr: float = 0.09,
    inner_steps: int = 5,
    local_steps: int = 20,
    beta: float = 1.0,
    mu: float = 0.0,
    personal_model: str = "theta",
) -> PFedMe:
    """pFedMe (Dinh et al. 2020): ``inner_steps`` K personal steps at ``personal_lr`` per local
    round, ``local_steps`` R local rounds, Moreau coupling ``lam``, server mixing ``beta``
    (defaults: the pFedMe repository's main.py); ``mu`` the l2 term of the personal step only
    (the code's 0.001); ``personal_model`` "theta" (paper) or "local" (w_{i,R}, the code)."""
    if inner_steps < 1 or local_steps < 1:
        raise ValueError("inner_steps and local_steps must be >= 1")
    if personal_model not in PERSONAL_MODELS:
        raise ValueError(f"personal_model must be one of {PERSONAL_MODELS}, got {personal_model!r}")
    if mu < 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    return PFedMe(lam, personal_lr, inner_steps, local_steps, beta, mu, personal_model)

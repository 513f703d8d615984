"""pFedMT — Personalized Multi-tier Federated Learning using Moreau envelopes (Algorithm 1).

Three nested loops per global round t (global server -> teams -> devices):

* device (Eq. 10, Alg. 1 line 6), L local iterations from theta_ij = w_i:
  theta <- theta - alpha (grad f_ij(theta) + lam (theta - w_i));
* team (Eq. 7, Alg. 1 lines 8-9), K team iterations from w_i = x^t:
  theta_bar_i = sum_j delta_j theta_ij;  w_i <- (1 - eta lam - eta gamma) w_i + eta gamma x^t + eta lam theta_bar_i;
* global (Alg. 1 lines 11-12): w_bar = sum_i tau_i w_i, then
  ``global_step="eq4"`` (default): x <- (1 - beta gamma) x + beta gamma w_bar   (Eq. 4 and PerMFL_1 code),
  ``global_step="algorithm1"``:    x <- (1 - beta gamma) x + beta w_bar         (Alg. 1 line 12 as printed).

Fidelity choices (see docs/original_code_notes.md §3.2-3.3):

* all teams and all devices of every team take part in every round/team iteration (code default);
* ``weighting="samples"`` (default, paper): delta_j = n_ij / n_i within a team, tau_i = n_i / n;
  ``weighting="uniform"`` (PerMFL_1 code): delta_j = 1 / N_i, tau_i = 1 / M;
* ``device_lam`` (default None: the paper's single lam in both tiers): the device-level coupling of
  Eq. (10) on its own.  The released PerMFL_1 code (85f46c6772ea) passes ``(..., beta, lamda,
  local_epochs)`` positionally into ``User.__init__(..., beta, eta, lamda, ...)``, so the lam that
  ``pFedMeOptimizer`` uses at the device level is ``local_epochs`` (L = 20), while the team step
  uses lam (15): the code's reading is ``device_lam: 20``;
* one local iteration = ONE minibatch of ``fed.local.batch_size`` rows, drawn uniformly *with
  replacement* from the device's training rows, from its own ``minibatches`` stream (the code cycles an
  unshuffled DataLoader; with-replacement draws keep the sampling stateless across rounds).
  A device without training rows contributes no data gradient (only the proximal pull);
* plain gradient steps (``fed.local.lr``/momentum are not used: alpha, eta, beta are pFedMT's
  own step sizes); f_ij = cross-entropy of the model's logits (the code uses NLL of log_softmax,
  the same thing) plus ``fed.local.weight_decay``/2 ||theta||^2 (the l2-regularised MLR);
* personalised model of device j = theta_ij after its last local loop (code's ``local_model``),
  i.e. the devices' last loop starts from w_i^{t,K-1};
* only parameters are trained.  Buffers (BatchNorm's running statistics; none in the paper's
  MLR, DNN and CNN) are each device's own, moved by its forwards through the round from the
  global model's; the personalised model keeps them and the global model takes their average
  with the two tiers' weights tau_i delta_j (fedbench's choice; the paper has no BatchNorm).

All devices of all teams are advanced at once: per-device parameters are stacked along a
leading axis and :class:`~fedbench.engine.device_gradient.MinibatchGradients` takes every
device's Eq. (10) step in one call (``oracle.step``: the gradient fused into the update for
Linear/ReLU stacks, the wide model for CNNs), replayed as a CUDA graph on CUDA; team models
``[M, ...]`` reach their devices by indexing with the team-id vector.  The update arithmetic
(:func:`pfedmt_round`) takes the device gradient (or the fused device step) as a plug-in, so the
tests run the very same code on quadratic losses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.numerics import VMAP_LAYOUT as VMAP
from fedbench.engine.weights import Weights, broadcast, parameter_names, weighted_average
from fedbench.registry.search_space import Relative

GLOBAL_STEPS = ("eq4", "algorithm1")
WEIGHTINGS = ("samples", "uniform")

# device_gradient(theta [D, ...] stacked, k, l) -> (grad f_ij at theta [D, ...], loss [D] or None)
DeviceGradient = Callable[[Weights, int, int], tuple[Weights, "torch.Tensor | None"]]
# device_step(theta, anchor, loss_sum, k, l): Eq. (10) in place on theta (anchor: w_i per device), the
# devices' losses added to loss_sum [D]; returns whether it gave losses
DeviceStep = Callable[[Weights, Weights, torch.Tensor, int, int], bool]


def global_update(x: torch.Tensor, w_bar: torch.Tensor, beta: float, gamma: float, rule: str = "eq4") -> torch.Tensor:
    """Alg. 1 line 12: ``eq4`` (1 - beta gamma) x + beta gamma w_bar; ``algorithm1`` (1 - beta gamma) x + beta w_bar."""
    if rule == "eq4":
        return (1 - beta * gamma) * x + (beta * gamma) * w_bar
    if rule == "algorithm1":
        return (1 - beta * gamma) * x + beta * w_bar
    raise ValueError(f"global_step must be one of {GLOBAL_STEPS}, got {rule!r}")


def _mix(matrix: torch.Tensor, stacked: torch.Tensor) -> torch.Tensor:
    """``matrix [R, C] @ stacked [C, ...]`` -> ``[R, ...]`` (weighted sums over the leading axis)."""
    flat = stacked.reshape(stacked.shape[0], -1)
    return (matrix.to(flat.dtype) @ flat).reshape(matrix.shape[0], *stacked.shape[1:])


def aggregation_weights(team_of: torch.Tensor, sizes: torch.Tensor, weighting: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [M, D], tau [M]): A[i, j] = delta_j if device j is in team i, else 0 (rows sum to 1).

    ``samples``: delta_j = n_j / n_team, tau_i = n_team / n (Alg. 1 lines 8 and 11);
    ``uniform``: delta_j = 1 / N_i, tau_i = 1 / M (PerMFL_1 code).  A team whose devices hold no
    samples falls back to uniform device weights (its tau is 0 anyway under ``samples``).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    num_teams = int(team_of.max()) + 1
    member = F.one_hot(team_of, num_teams).T.to(torch.float64)  # [M, D]
    if weighting == "uniform":
        mass = member
        tau = torch.full((num_teams,), 1.0 / num_teams, dtype=torch.float64, device=team_of.device)
    else:
        mass = member * sizes.to(torch.float64)[None, :]
        empty = mass.sum(1, keepdim=True) == 0
        tau = mass.sum(1) / mass.sum().clamp_min(1e-300)
        mass = torch.where(empty, member, mass)
    return mass / mass.sum(1, keepdim=True), tau


def pfedmt_round(
    x: Weights,
    team_of: torch.Tensor,
    A: torch.Tensor,
    tau: torch.Tensor,
    device_gradient: DeviceGradient,
    *,
    team_iterations: int,
    local_iterations: int,
    alpha: float,
    eta: float,
    lam: float,
    gamma: float,
    beta: float,
    global_step: str = "eq4",
    device_lam: float | None = None,
    device_step: DeviceStep | None = None,
) -> tuple[Weights, Weights, torch.Tensor | None]:
    """One global round of Algorithm 1 on the (parameter) dict ``x``.  ``device_lam``: the coupling of
    the device step (Eq. 10); None: ``lam``, which the team step (Eq. 7) uses in either case.
    ``device_step``: Eq. (10) as one fused step (:func:`minibatch_device_step`); default: built from
    ``device_gradient`` (:func:`gradient_device_step`).  theta and the anchors w_i stay the same
    tensors through the round (updated in place), so a device step may be replayed as a CUDA graph.

    ``team_of`` [D]: team id (0..M-1) of every device; ``A`` [M, D], ``tau`` [M]: aggregation
    weights (:func:`aggregation_weights`).  Returns (x^{t+1}, theta [D, ...] after the devices'
    last local loop, mean device loss over the K*L steps [D] or None if the gradient gives none).
    """
    x_old = x
    num_teams = A.shape[0]
    dlam = lam if device_lam is None else device_lam
    # w_i^{t,0} = x^t for every team
    w = broadcast(x_old, num_teams)
    if device_step is None:
        device_step = gradient_device_step(device_gradient, alpha, dlam)
    theta: Weights = {}
    anchor: Weights = {}
    first = next(iter(x_old.values()))
    loss_sum, has_loss = torch.zeros(team_of.shape[0], dtype=first.dtype, device=first.device), False
    for k in range(team_iterations):
        for n, v in w.items():  # w_i broadcast to its devices, and Alg. 1 line 4: theta_ij <- w_i^{t,k}
            if k:
                torch.index_select(v, 0, team_of, out=anchor[n])
                theta[n].copy_(anchor[n])
            else:
                anchor[n] = v.index_select(0, team_of)
                theta[n] = anchor[n].clone()
        for l in range(local_iterations):
            has_loss = device_step(theta, anchor, loss_sum, k, l) or has_loss
        # Alg. 1 lines 8-9 / Eq. (7)
        w = {
            n: (1 - eta * lam - eta * gamma) * wi + (eta * gamma) * x_old[n].unsqueeze(0) + (eta * lam) * _mix(A, theta[n])
            for n, wi in w.items()
        }
    # Alg. 1 lines 11-12
    x_new = {n: global_update(x_old[n], _mix(tau[None, :], w[n])[0], beta, gamma, global_step) for n in x_old}
    steps = max(team_iterations * local_iterations, 1)
    return x_new, theta, loss_sum / steps if has_loss else None


def gradient_device_step(device_gradient: DeviceGradient, alpha: float, dlam: float) -> DeviceStep:
    """Eq. (10) from a device gradient: theta <- theta - alpha (grad f + lam_d (theta - w_i))
    = (1 - alpha lam_d) theta - alpha grad f + alpha lam_d w_i, in place (fused ``_foreach``)."""

    def step(theta: Weights, anchor: Weights, loss_sum: torch.Tensor, k: int, l: int) -> bool:
        grads, loss = device_gradient(theta, k, l)
        t = list(theta.values())
        torch._foreach_mul_(t, 1 - alpha * dlam)
        torch._foreach_add_(t, [grads[n] for n in theta], alpha=-alpha)
        torch._foreach_add_(t, [anchor[n] for n in theta], alpha=alpha * dlam)
        if loss is not None:
            loss_sum.add_(loss.detach())
        return loss is not None

    return step


def minibatch_device_gradient(fed: Federation, single: Weights, local_iterations: int) -> tuple[DeviceGradient, Weights]:
    """Every device's gradient on one fresh minibatch of its own training rows per local iteration
    (rows for the L iterations drawn at the start of each team iteration), and the devices' own
    buffers (from ``single``'s), which its forwards update."""
    oracle = fed.minibatch_gradients()
    everyone = torch.arange(fed.num_clients, device=fed.device)
    buffers = fed.client_buffers(single, fed.num_clients)
    batches = None

    def gradient(theta: Weights, k: int, l: int):
        nonlocal batches
        if l == 0:
            batches = oracle.draw(local_iterations, everyone, fed.client_streams("minibatches", everyone))
        return oracle(theta, batches[l], everyone, buffers)

    return gradient, buffers


def minibatch_device_step(
    fed: Federation, single: Weights, team_iterations: int, local_iterations: int, alpha: float, dlam: float,
) -> tuple[DeviceStep, Weights]:
    """:func:`minibatch_device_gradient`'s draws and gradients with Eq. (10) as the oracle's one fused
    step (:meth:`~fedbench.engine.device_gradient.GradientOracle.step`), recurring on the round's
    theta and anchors (a CUDA graph on CUDA); and the devices' own buffers."""
    oracle = fed.minibatch_gradients()
    everyone = torch.arange(fed.num_clients, device=fed.device)
    buffers = fed.client_buffers(single, fed.num_clients)
    batches, bound, run = None, None, None

    def step(theta: Weights, anchor: Weights, loss_sum: torch.Tensor, k: int, l: int) -> bool:
        nonlocal batches, bound, run
        if l == 0:
            batches = oracle.draw(local_iterations, everyone, fed.client_streams("minibatches", everyone))
        if bound is None or any(a is not b for a, b in zip(bound, (theta, anchor, loss_sum))):  # bound once a round
            bound = (theta, anchor, loss_sum)
            run = oracle.recurring(lambda x, y: oracle.step(theta, (x, y), everyone, buffers, lr=alpha, decay=alpha * dlam,
                                                            anchor=anchor, pull=alpha * dlam, loss_sum=loss_sum),
                                   team_iterations * local_iterations)
        run(*batches[l])
        return True

    return step, buffers


def team_ids(fed: Federation) -> torch.Tensor:
    """Team of every client as 0..M-1 (one team of everybody where ``fed.teams`` is None)."""
    if fed.teams is None:
        return torch.zeros(fed.num_clients, dtype=torch.long, device=fed.device)
    teams = np.asarray(fed.teams)
    if teams.shape != (fed.num_clients,):
        raise ValueError(f"fed.teams has shape {teams.shape}, expected ({fed.num_clients},)")
    _, inverse = np.unique(teams, return_inverse=True)
    return torch.as_tensor(inverse.reshape(-1), dtype=torch.long, device=fed.device)


@dataclass(frozen=True)
class PFedMT(Algorithm):
    team_iterations: int = 30
    local_iterations: int = 20
    alpha: float = 0.01
    eta: float = 0.03
    lam: float = 15.0
    gamma: float = 1.0
    beta: float = 1.0
    global_step: str = "eq4"
    weighting: str = "samples"
    device_lam: float | None = None  # None: lam (the paper); PerMFL_1's code: local_iterations (20)

    # training settings pFedMT never reads (setting them is a config error; its step sizes are alpha, eta, beta)
    ignored_training = {
        "local_epochs": "pFedMT runs team_iterations x local_iterations minibatch steps, not epochs",
        "momentum": "pFedMT's steps are plain gradient steps, without momentum",
        "channels_last": f"pFedMT's minibatch-gradient oracle {VMAP}",
    }
    harmless_training = {"momentum": 0.0, "channels_last": False}  # what it does anyway

    def __post_init__(self):
        if self.global_step not in GLOBAL_STEPS:
            raise ValueError(f"global_step must be one of {GLOBAL_STEPS}, got {self.global_step!r}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")

    @classmethod
    def workload(cls, params, training) -> Workload:
        """Every device of every team takes part every round: K = ``team_iterations`` team iterations of
        L = ``local_iterations`` minibatch steps each (Algorithm 1 lines 6-9, Eq. 10)."""
        return Workload(every_client_trains=True, local_steps=params["team_iterations"] * params["local_iterations"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"global": initial, "personal": broadcast(initial, fed.num_clients)}  # theta_ij = w_i^{0,0} = x^0

    def round(self, fed: Federation, state: dict, round_: int):
        names = parameter_names(fed.model)
        x = state["global"]
        params = {n: x[n] for n in names}
        team_of = team_ids(fed)
        A, tau = aggregation_weights(team_of, fed.data.train.counts, self.weighting)
        dlam = self.lam if self.device_lam is None else self.device_lam
        step, buffers = minibatch_device_step(fed, x, self.team_iterations, self.local_iterations, self.alpha, dlam)
        with torch.no_grad():  # torch.func.grad works under no_grad; no autograd graph across steps
            x_params, theta, loss = pfedmt_round(
                params, team_of, A, tau, None,
                team_iterations=self.team_iterations, local_iterations=self.local_iterations,
                alpha=self.alpha, eta=self.eta, lam=self.lam, gamma=self.gamma, beta=self.beta,
                global_step=self.global_step, device_lam=self.device_lam, device_step=step,
            )
        if not theta:  # K = 0: nothing trained this round
            theta = {n: state["personal"][n] for n in names}
        personal = {**state["personal"], **theta, **buffers}
        x_buffers = weighted_average(buffers, tau @ A) if buffers else {}  # device j weighs tau_i delta_j
        if loss is None:
            loss = torch.zeros(fed.num_clients, device=fed.device)
        return {"global": {**x, **x_params, **x_buffers}, "personal": personal}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return state["personal"]

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("pfedmt", bounds={
        "team_iterations": ">= 1", "local_iterations": ">= 1", "alpha": "> 0", "eta": "> 0", "lam": "> 0", "gamma": ">= 0",
        "beta": "> 0", "global_step": GLOBAL_STEPS, "weighting": WEIGHTINGS, "device_lam": "> 0",
    }, search={"lr": None, "alpha": Relative(0.3, 3), "eta": Relative(0.3, 3), "lam": Relative(0.2, 5)})  # lr: not read
def pfedmt(
    *,
    team_iterations: int = 30,
    local_iterations: int = 20,
    alpha: float = 0.01,
    eta: float = 0.03,
    lam: float = 15.0,
    gamma: float = 1.0,
    beta: float = 1.0,
    global_step: str = "eq4",
    weighting: str = "samples",
    device_lam: float | None = None,
) -> PFedMT:
    """pFedMT (Personalized Multi-tier FL, Algorithm 1): team_iterations K, local_iterations L,
    device lr alpha, team lr eta, device/team coupling lam, team/global coupling gamma, global lr
    beta; ``global_step`` "eq4" (code) or "algorithm1"; ``weighting`` "samples" (paper) or "uniform" (code);
    ``device_lam``: the device step's coupling where it differs from the team step's lam (None: lam, the
    paper; the PerMFL_1 code's is local_epochs = 20 through a positional-argument slip, see the module docstring)."""
    return PFedMT(team_iterations, local_iterations, alpha, eta, lam, gamma, beta, global_step, weighting, device_lam)

"""FedGen — data-free knowledge distillation with a server-side generator (Zhu et al., ICML'21,
Eq. (4)-(5)), as the FedMR repository runs it (``Training_FedGen.py``, ``models/generator.py``,
``utils/model_config.py``; notes §2.6).

* The model's *head* is its last ``nn.Linear``; the generator produces head inputs:
  [noise ~ U(0, 1)^noise_dim ; one-hot(y)] -> Linear(., hidden) - BatchNorm - ReLU -> Linear(hidden, latent).
* Server, every round after aggregation: ``generator_epochs x teacher_iterations`` Adam steps
  (lr ``generator_lr``, weight decay 1e-2, batch ``generator_batch``) on
  sum_u mean_b w_{u,y_b} CE(head_u(G(y_b)), y_b)  +  ``diversity`` x DiversityLoss,
  with y drawn uniformly from the labels the round's clients hold, head_u the u-th sampled client's
  trained head and w_{u,y} = n_{u,y} / sum_u' n_{u',y} its share of label y.  DiversityLoss =
  exp(-mean_ij ||eps_i - eps_j||^2/d_eps * ||G_i - G_j||_1/d_G) (FedGen's ``DiversityLoss('l1')``).
* Clients, from the second round on (the generator is trained after round 1): the local loss is
  CE(f(x), y) + alpha CE(head(G(y_hat)), y_hat) + beta KL(softmax(head(G(y))) || softmax(f(x)))
  on every minibatch (y_hat drawn uniformly from the global label set, G in evaluation mode,
  its outputs fixed).  The server aggregates with sample weights.
* The released hyper-parameters (alpha, beta / generator lr): CIFAR-10 0.2, 0.2 / 3e-4;
  CIFAR-100 10, 1 / 1e-4; FEMNIST 10, 10 / 3e-4.  FedGen's own code also decays alpha and beta
  by 0.98 per round; the FedMR repository's notes do not list it, so it is off by default
  (``decay``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.engine.custom_step import train_with_gradient
from fedbench.engine.numerics import VMAP_LAYOUT as VMAP
from fedbench.engine.traffic import Traffic, weights_bytes
from fedbench.engine.weights import Weights, broadcast


class Generator(nn.Module):
    """FedGen's generator of head inputs for labels."""

    def __init__(self, num_classes: int, latent: int, noise_dim: int = 100, hidden: int = 512):
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.net = nn.Sequential(nn.Linear(noise_dim + num_classes, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, latent))

    def forward(self, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([noise, F.one_hot(y, self.num_classes).to(noise.dtype)], -1))


def head_names(model: nn.Module) -> tuple[str, str, int]:
    """Weight and bias names of the model's last ``nn.Linear`` (the classifier head) and its input width."""
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = (name, module)
    if last is None or last[1].bias is None:
        raise ValueError("FedGen needs a model whose last layer is an nn.Linear with a bias (the classifier head)")
    name, module = last
    return f"{name}.weight", f"{name}.bias", module.in_features


def diversity_loss(noise: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """exp(-mean_ij d_noise(i, j) d_out(i, j)), d_noise the mean squared and d_out the mean absolute
    difference (FedGen's ``DiversityLoss(metric='l1')``)."""
    d_out = (output[:, None, :] - output[None, :, :]).abs().mean(-1)
    d_noise = (noise[:, None, :] - noise[None, :, :]).pow(2).mean(-1)
    return torch.exp(-(d_noise * d_out).mean())


def generator_loss(generator: Generator, heads: tuple[torch.Tensor, torch.Tensor], label_share: torch.Tensor,
                   y: torch.Tensor, noise: torch.Tensor, diversity: float) -> torch.Tensor:
    """Teacher loss of the label-weighted client heads ``heads`` = (W [U, C, L], b [U, C]) plus the
    diversity term; ``label_share`` [U, C] = w_{u,y}."""
    z = generator(y, noise)
    w, b = heads
    logits = torch.einsum("bl,ucl->ubc", z, w) + b[:, None, :]  # [U, B, C]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.repeat(len(w)), reduction="none").view(len(w), -1)
    teacher = (ce * label_share[:, y]).mean(1).sum()
    return teacher + diversity * diversity_loss(noise, z)


def regularised_loss(model: nn.Module, w_name: str, b_name: str, alpha: float, beta: float):
    """One client's FedGen local loss on a masked minibatch and its generated head inputs:
    CE(f(x), y) + alpha CE(head(z_hat), y_hat) + beta KL(softmax(head(z_real)) || softmax(f(x)));
    returns (loss, CE) for ``grad_and_value(has_aux=True)``."""

    def loss(params, buffers, x, y, mask, z_real, z_hat, y_hat):
        logits = functional_call(model, {**params, **buffers}, (x,))
        per_sample = F.cross_entropy(logits, y, reduction="none")
        weight = mask / mask.sum().clamp_min(1.0)
        ce = (per_sample * weight).sum()
        target = F.softmax(F.linear(z_real, params[w_name], params[b_name]), -1).detach()
        kl = ((target * (target.clamp_min(1e-12).log() - F.log_softmax(logits, -1))).sum(-1) * weight).sum()
        teacher = F.cross_entropy(F.linear(z_hat, params[w_name], params[b_name]), y_hat)
        return ce + alpha * teacher + beta * kl, ce

    return loss


@dataclass(frozen=True)
class FedGen(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    generative_alpha: float = 0.2
    generative_beta: float = 0.2
    generator_lr: float = 3e-4
    noise_dim: int = 100
    hidden: int = 512
    generator_epochs: int = 10
    teacher_iterations: int = 5
    generator_batch: int = 128
    diversity: float = 1.0
    decay: float = 1.0

    ignored_training = {"channels_last": f"FedGen's generator-regularised step (after its first round) {VMAP}"}
    harmless_training = {"channels_last": False}

    def init(self, fed: Federation, initial: Weights) -> dict:
        w_name, b_name, latent = head_names(fed.model)
        classes = fed.data.num_classes
        labels = fed.data.y[fed.data.train.index].masked_fill(~fed.data.train.mask(), classes)
        counts = F.one_hot(labels, classes + 1)[..., :classes].sum(1).double()  # [K, C]
        seed = int(torch.randint(2**31, (1,), generator=fed.generator))
        with torch.random.fork_rng(devices=[]):  # the generator's initial weights, from the run's stream
            torch.manual_seed(seed)
            generator = Generator(classes, latent, self.noise_dim, self.hidden).to(fed.device)
        optimizer = torch.optim.Adam(generator.parameters(), lr=self.generator_lr, weight_decay=1e-2)
        return {"global": initial, "generator": generator, "optimizer": optimizer, "label_counts": counts,
                "head": (w_name, b_name), "trained_generator": False, "generator_losses": []}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        start = broadcast(state["global"], len(chosen))
        if state["trained_generator"]:
            step = self._client_gradient(fed, state, round_)
            plan = fed.batch_plan(chosen, fed.local.epochs, fed.local.batch_size)
            trained, loss = train_with_gradient(fed.model, fed.data, start, chosen, plan, fed.local, step, fed.numerics)
        else:
            trained, loss = fed.train_clients(start, chosen)
        w_name, b_name = state["head"]
        heads = (trained[w_name].detach(), trained[b_name].detach())
        losses = self.train_generator(fed, state, heads, state["label_counts"][chosen])
        return {**state, "global": fed.average(trained, chosen), "trained_generator": True,
                "generator_losses": state["generator_losses"] + [losses[-1]]}, loss

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """The global model down and the trained one up (FedAvg's), plus the generator down to every
        sampled client once the server has trained it (Alg. 1: from the second round on)."""
        size = fed.model_bytes()
        extra = weights_bytes(before["generator"].state_dict()) if before["trained_generator"] else 0
        return Traffic.to(fed.num_clients, fed.sampled, size + extra, size)

    def train_generator(self, fed: Federation, state: dict, heads, counts: torch.Tensor) -> list[float]:
        """``generator_epochs x teacher_iterations`` Adam steps on the teacher + diversity loss; the losses."""
        generator, optimizer = state["generator"], state["optimizer"]
        share = (counts / counts.sum(0, keepdim=True).clamp_min(1e-12)).to(heads[0].dtype)
        present = torch.nonzero(counts.sum(0) > 0).flatten().to(fed.device)
        generator.train()
        out = []
        for _ in range(self.generator_epochs * self.teacher_iterations):
            y = present[torch.randint(len(present), (self.generator_batch,), generator=fed.generator).to(fed.device)]
            noise = torch.rand(self.generator_batch, self.noise_dim, generator=fed.generator).to(fed.device)
            optimizer.zero_grad()
            loss = generator_loss(generator, heads, share, y, noise, self.diversity)
            loss.backward()
            optimizer.step()
            out.append(float(loss.detach()))
        return out

    def _client_gradient(self, fed: Federation, state: dict, round_: int):
        """The regularised local loss's gradient for every client row (vmap over the client axis)."""
        model, generator = fed.model, state["generator"]
        w_name, b_name = state["head"]
        alpha = self.generative_alpha * self.decay ** (round_ - 1)
        beta = self.generative_beta * self.decay ** (round_ - 1)
        classes = fed.data.num_classes
        generator.eval()

        vmapped = vmap(grad_and_value(regularised_loss(model, w_name, b_name, alpha, beta), has_aux=True), randomness="different")

        def grad_fn(params, buffers, x, y, mask):
            k, batch = y.shape
            with torch.no_grad():
                noise = torch.rand(k * batch, self.noise_dim, generator=fed.generator).to(fed.device)
                z_real = generator(y.reshape(-1), noise).view(k, batch, -1)
                y_hat = torch.randint(classes, (k, batch), generator=fed.generator).to(fed.device)
                noise = torch.rand(k * batch, self.noise_dim, generator=fed.generator).to(fed.device)
                z_hat = generator(y_hat.reshape(-1), noise).view(k, batch, -1)
            grads, (_, ce) = vmapped(params, buffers, x, y, mask, z_real, z_hat, y_hat)
            return grads, ce

        return grad_fn

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return broadcast(state["global"], fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("fedgen")
def fedgen(
    *,
    generative_alpha: float = 0.2,
    generative_beta: float = 0.2,
    generator_lr: float = 3e-4,
    noise_dim: int = 100,
    hidden: int = 512,
    generator_epochs: int = 10,
    teacher_iterations: int = 5,
    generator_batch: int = 128,
    diversity: float = 1.0,
    decay: float = 1.0,
) -> FedGen:
    """FedGen (Zhu et al. 2021) with the released per-dataset ``generative_alpha``/``generative_beta``
    and ``generator_lr`` (defaults: CIFAR-10's), FedGen's server settings otherwise."""
    for name, value in (("generative_alpha", generative_alpha), ("generative_beta", generative_beta), ("diversity", diversity)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if generator_lr <= 0:
        raise ValueError(f"generator_lr must be > 0, got {generator_lr}")
    for name, value in (("noise_dim", noise_dim), ("hidden", hidden), ("generator_epochs", generator_epochs),
                        ("teacher_iterations", teacher_iterations), ("generator_batch", generator_batch)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if not 0 < decay <= 1:
        raise ValueError(f"decay must lie in (0, 1], got {decay}")
    return FedGen(float(generative_alpha), float(generative_beta), float(generator_lr), int(noise_dim), int(hidden),
                  int(generator_epochs), int(teacher_iterations), int(generator_batch), float(diversity), float(decay))

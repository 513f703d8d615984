"""FLT's encoder: pretraining the ConvAE (rule ``pretrain_encoder``) and client signatures with
optional per-client fine-tuning (FCR, Algorithm 2 of the paper).

Pretraining (paper section 4.1 "Encoders", Enc1/Enc2; the authors' scripts, notes section 4.3):
the ConvAE of Table 13 learns to reconstruct the images of an encoder dataset (e.g. Fashion-MNIST
for Enc2 on MNIST/FEMNIST) under the mean-squared error, with Adam (lr 1e-3), batch 64, 25-30
epochs, StepLR(10, 0.5), keeping the checkpoint of the lowest test loss.  The paper states only
"pretrained ... in an unsupervised way ... based on a mean-squared-error (MSE) loss"; the rest is
the code's, and every value is a config key (``ENCODER_DEFAULTS``).

Fine-tuning (Enc2, J epochs): the paper has every client fine-tune the encoder on its own data
for J = 5 epochs before embedding.  :func:`embed_clients` does exactly that, for all clients at
once: each client's copy of the whole ConvAE takes its own minibatch steps (MSE) in one
``torch.func.vmap`` call per step.  (The original code instead fine-tunes one shared autoencoder
sequentially client after client, the refactor once centrally; see notes section 4.4.)

Encoder file ``{results}/encoders/{name}.pt``: ``{"state_dict", "spec" (rebuilds the ConvAE),
"name", "settings", "input_shape", "history"}``; :func:`load_encoder` rebuilds the module.
"""

from __future__ import annotations

import copy
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from tqdm.auto import tqdm

from fedbench.data import load_dataset
from fedbench.data.partition_file import atomic_write
from fedbench.engine.batches import BatchPlan, make_batch_plan
from fedbench.engine.device import resolve_device
from fedbench.engine.federated_data import FederatedData
from fedbench.registry.plugins import load_plugins
from fedbench.models.convae import ConvAE, autoencoder_spec, build_autoencoder

log = logging.getLogger("fedbench")

# an ``encoders`` entry's keys besides ``dataset`` (required) and ``classes`` (all when absent)
ENCODER_DEFAULTS = {
    "arch": "auto",  # convae (grey), convae_colour, or auto (by the number of channels)
    "latent_dim": 128,  # paper: e = 128 (the original CIFAR code: 64)
    "output": "auto",  # decoder output: sigmoid | tanh | none; auto: the arch's (sigmoid grey, none colour)
    "epochs": 25,  # authors' scripts: 25-30
    "batch_size": 64,  # original scripts: 64 (refactor: 10)
    "lr": 1e-3,  # Adam
    "lr_decay_every": 10,  # StepLR step size in epochs (original: 10); null: constant lr
    "lr_decay": 0.5,  # StepLR gamma (original: 0.5)
    "keep_best": True,  # keep the epoch of the lowest test loss (original), when the dataset has a test split
    "max_samples": None,  # cap on the training images (seeded random subset), for quick suites
    "seed": 0,  # weight init and batch order
}
ENCODER_KEYS = ("dataset", "classes", *ENCODER_DEFAULTS)


# ---- pretraining --------------------------------------------------------------------------


def encoder_settings(config: dict, name: str) -> dict:
    """The config's ``encoders.<name>`` entry with ``ENCODER_DEFAULTS`` filled in."""
    entry = config["encoders"][name]
    unknown = sorted(set(entry) - set(ENCODER_KEYS))
    if unknown:
        raise ValueError(f"encoders.{name}: unknown keys {unknown}; valid keys: {', '.join(ENCODER_KEYS)}")
    return {**ENCODER_DEFAULTS, "classes": None, **entry}


def pretraining_images(config: dict, settings: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The encoder dataset's official training images (``classes`` only, at most ``max_samples``)
    and its test images of the same classes (``None`` when the dataset has no official split)."""
    data = load_dataset(config["datasets"][settings["dataset"]], config.get("data_root", "data"))
    keep = np.ones(len(data.y), dtype=bool)
    if settings["classes"] is not None:
        keep = np.isin(data.y, np.asarray(settings["classes"]))
    train = np.intersect1d(data.train_indices(), np.flatnonzero(keep))
    test = np.intersect1d(data.test_indices(), np.flatnonzero(keep))
    if len(train) == 0:
        raise ValueError(f"encoder dataset {settings['dataset']!r} has no training images of classes {settings['classes']}")
    cap = settings["max_samples"]
    if cap is not None and len(train) > cap:
        chosen = np.random.default_rng(settings["seed"]).choice(len(train), size=cap, replace=False)
        train = np.sort(train[chosen])
    x = torch.from_numpy(data.x)
    return x[train].contiguous(), (x[test].contiguous() if len(test) else None)


@torch.no_grad()
def reconstruction_loss(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> float:
    """Mean squared reconstruction error of ``model`` over the images ``x`` (on the model's device)."""
    device = next(model.parameters()).device
    total = 0.0
    for i in range(0, len(x), batch_size):
        xb = x[i : i + batch_size].to(device)
        total += float(F.mse_loss(model(xb), xb, reduction="sum"))
    return total / max(x.numel(), 1)


def pretrain_encoder(config: dict, name: str, out_pt, out_curve_csv, device: str | None = None,
                     provenance: dict | None = None) -> pd.DataFrame:
    """Pretrain the ConvAE of ``config["encoders"][name]`` (MSE reconstruction, Adam + StepLR) and
    write the encoder file ``out_pt`` and the loss curve ``out_curve_csv`` (epoch, train_loss,
    test_loss, lr; epoch 0 = before training).  Deterministic per the entry's ``seed`` on the CPU.
    ``provenance``: the record stored in the file (the rule's script computes it with
    :func:`fedbench.run.provenance.provenance`; this module does not import the layer above it)."""
    load_plugins(config.get("plugins") or ())  # a plugin's dataset source
    settings = encoder_settings(config, name)
    dev = resolve_device(device or config.get("device", "auto"))
    x_train, x_test = pretraining_images(config, settings)
    spec = autoencoder_spec(settings["arch"], tuple(x_train.shape[1:]), settings["latent_dim"], settings["output"])
    torch.manual_seed(settings["seed"])
    model = build_autoencoder(spec).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    scheduler = None
    if settings["lr_decay_every"]:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, settings["lr_decay_every"], settings["lr_decay"])
    generator = torch.Generator().manual_seed(settings["seed"])
    x_train_dev = x_train.to(dev)
    batch = settings["batch_size"]
    log.info(
        "encoder %s: %s (%d parameters) on %d images %s of %s, %d epochs, on %s",
        name, spec["arch"], sum(p.numel() for p in model.parameters()), len(x_train),
        tuple(x_train.shape[1:]), settings["dataset"], settings["epochs"], dev,
    )

    def test_loss() -> float:
        return float("nan") if x_test is None else reconstruction_loss(model, x_test)

    history = [{"epoch": 0, "train_loss": reconstruction_loss(model, x_train), "test_loss": test_loss(), "lr": settings["lr"]}]
    best = (history[0]["test_loss"], copy.deepcopy(model.state_dict()), 0)
    for epoch in tqdm(range(1, settings["epochs"] + 1), desc=f"encoder {name}", unit="epoch", mininterval=5):
        model.train()
        lr = optimizer.param_groups[0]["lr"]
        order = torch.randperm(len(x_train), generator=generator).to(dev)
        total = 0.0
        for i in range(0, len(order), batch):
            xb = x_train_dev.index_select(0, order[i : i + batch])
            loss = F.mse_loss(model(xb), xb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(xb)
        if scheduler is not None:
            scheduler.step()
        model.eval()
        row = {"epoch": epoch, "train_loss": total / len(x_train), "test_loss": test_loss(), "lr": lr}
        history.append(row)
        log.info("encoder %s epoch %d/%d train_loss %.5f test_loss %.5f lr %.2g",
                 name, epoch, settings["epochs"], row["train_loss"], row["test_loss"], lr)
        if settings["keep_best"] and x_test is not None and row["test_loss"] < best[0]:
            best = (row["test_loss"], copy.deepcopy(model.state_dict()), epoch)
    if settings["keep_best"] and x_test is not None:
        model.load_state_dict(best[1])
        log.info("encoder %s: keeping epoch %d (lowest test loss %.5f)", name, best[2], best[0])

    curve = pd.DataFrame(history)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    payload = {
        "name": name,
        "spec": spec,
        "settings": settings,
        "input_shape": list(x_train.shape[1:]),
        "state_dict": state,
        "history": history,
        "kept_epoch": best[2] if settings["keep_best"] and x_test is not None else settings["epochs"],
        "provenance": provenance,
    }
    atomic_write(out_pt, lambda p: torch.save(payload, p))
    atomic_write(out_curve_csv, lambda p: curve.to_csv(p, index=False))
    return curve


def load_encoder(path, map_location="cpu") -> ConvAE:
    """The ConvAE an encoder file holds (``encode(x) -> [N, latent_dim]``), in eval mode."""
    payload = torch.load(path, map_location=map_location, weights_only=True)
    model = build_autoencoder(payload["spec"])
    model.load_state_dict(payload["state_dict"])
    return model.eval()


def plot_loss_curve(curve_csv, png) -> None:
    """The pretraining loss curve (train and test MSE per epoch, log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    curve = pd.read_csv(curve_csv)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(curve["epoch"], curve["train_loss"], marker=".", label="train")
    if curve["test_loss"].notna().any():
        ax.plot(curve["epoch"], curve["test_loss"], marker=".", label="test")
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("reconstruction MSE")
    ax.set_yscale("log")
    ax.set_title(Path(str(curve_csv)).name.removesuffix("_loss.csv"))
    ax.legend()
    fig.tight_layout()
    atomic_write(png, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)


# ---- client signatures --------------------------------------------------------------------

_ADAM_BETAS, _ADAM_EPS = (0.9, 0.999), 1e-8
_CHUNK_BYTES = {"cpu": 2**29, "cuda": 2**32}  # rough budget of one chunk's fine-tuning memory


def embed_clients(
    encoder: ConvAE,
    data: FederatedData,
    clients: torch.Tensor,
    *,
    finetune_epochs: int,
    lr: float = 1e-3,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    optimizer: str = "adam",
    chunk_size: int | None = None,
) -> list[np.ndarray]:
    """Each client's embeddings ``[n_c, latent_dim]`` of its training samples (``data.train``), in the
    order of ``clients``, after fine-tuning its own copy of the whole ConvAE on them for
    ``finetune_epochs`` epochs (MSE; ``optimizer`` adam, as the authors' code, or sgd; shuffled
    minibatches of ``batch_size`` drawn by :func:`~fedbench.engine.batches.make_batch_plan` from
    ``generator``).  ``finetune_epochs=0`` embeds with ``encoder`` as it is and draws nothing.

    The fine-tuning is vectorised over clients (stacked weights, ``vmap`` of ``grad``), in chunks of
    ``chunk_size`` clients (default: within a memory budget); it equals fine-tuning every client in
    turn with ``torch.optim.Adam``/``SGD`` on the same batches.  ``encoder`` is not modified.
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"unknown fine-tuning optimizer {optimizer!r}; valid choices: adam, sgd")
    device = data.x.device
    model = copy.deepcopy(encoder).to(device).eval()
    clients = clients.to(device)
    n = len(clients)
    if finetune_epochs <= 0 or n == 0:
        return _encode_one(model, data, clients)
    counts = data.train.counts[clients].cpu()
    plan = make_batch_plan(counts, finetune_epochs, batch_size, generator or torch.Generator().manual_seed(0))
    size = chunk_size or _default_chunk(model, data, batch_size, n)
    by_steps = torch.argsort(plan.steps_per_epoch, descending=True, stable=True)  # active clients = a prefix
    out: list[np.ndarray | None] = [None] * n
    for lo in range(0, n, size):
        pos = by_steps[lo : lo + size]
        chunk = clients[pos.to(device)]
        params = _finetune_chunk(model, data, chunk, BatchPlan(plan.order[pos], plan.counts[pos], plan.batch_size), lr, optimizer)
        for p, emb in zip(pos.tolist(), _encode_stacked(model, params, data, chunk)):
            out[p] = emb
    return out


# Images per pass when embedding.  512 (4096 until 2e2b0e1): the ConvAE's first activations of 4096 images
# (205 MB) left the CPU's caches, and every element-wise layer went to memory; 512 embed 60,000 Fashion-MNIST
# images in 5.6 CPU s instead of 13.8 (100 fine-tuned clients' 60,000: 7.6 instead of 19.5).  The embeddings
# are the same bit for bit (tests/test_encoders.py: one encoder, and 100 clients' own at 5 images each a pass;
# measured too: one encoder at passes of any multiple of 4 images, 33 to 300 clients' own at 4 to 40 images
# each) except where a pass holds 1-3 images a client (a chunk of over 128 fine-tuned clients, a short last
# pass, with either size): the convolution then takes another kernel, equal to float rounding.
ENCODE_ROWS = 512


@torch.no_grad()
def _encode_one(model: ConvAE, data: FederatedData, clients: torch.Tensor, batch: int = ENCODE_ROWS) -> list[np.ndarray]:
    """Embeddings of every client's training samples with one (shared) model, ``batch`` images a pass."""
    counts = data.train.counts[clients].tolist()
    rows = torch.cat([data.train.index[c, :k] for c, k in zip(clients.tolist(), counts)]) if counts else None
    if rows is None or len(rows) == 0:
        return [np.zeros((0, model.latent_dim), np.float32) for _ in counts]
    emb = torch.cat([model.encode(data.x.index_select(0, rows[i : i + batch])) for i in range(0, len(rows), batch)])
    return [e.cpu().numpy() for e in torch.split(emb, counts)]


def _default_chunk(model: ConvAE, data: FederatedData, batch_size: int, n: int) -> int:
    """Clients per vectorised pass within ``_CHUNK_BYTES``: each holds its weights, gradient and two
    Adam moments plus a minibatch's activations (about 6 conv-sized maps per sample)."""
    params = sum(p.numel() for p in model.parameters())
    first_conv = model.encoder[0]
    per_sample = 6 * first_conv.out_channels * math.prod(data.x.shape[2:])
    per_client = 4 * (4 * params + batch_size * per_sample)
    budget = _CHUNK_BYTES.get(data.x.device.type, _CHUNK_BYTES["cpu"])
    return max(1, min(n, budget // per_client))


def _masked_mse(model: nn.Module):
    def loss(params, x, mask):
        recon = functional_call(model, params, (x,))
        per_sample = (recon - x).pow(2).flatten(1).mean(1)
        return (per_sample * mask).sum() / mask.sum().clamp_min(1.0)

    return loss


@torch.no_grad()
def _finetune_chunk(model: ConvAE, data: FederatedData, clients, plan: BatchPlan, lr: float, optimizer: str):
    """Fine-tune one stacked copy of ``model`` per client of ``clients`` (sorted by steps, descending)
    along ``plan``; returns the stacked parameters ``{name: [n, ...]}``."""
    device = data.x.device
    n, epochs, batch = len(clients), plan.epochs, plan.batch_size
    params = {k: v.detach().unsqueeze(0).repeat(n, *[1] * v.dim()) for k, v in model.named_parameters()}
    steps_per_epoch = plan.steps_per_epoch.tolist()  # descending
    if not steps_per_epoch or steps_per_epoch[0] == 0:
        return params
    active = [sum(s < k for k in steps_per_epoch) for s in range(steps_per_epoch[0])]  # clients at step s
    width = len(active) * batch
    # global row of every (epoch, step, client, slot), padded to whole batches: rows[e, s, c, :]
    order = F.pad(plan.order, (0, max(width - plan.order.shape[2], 0)))[:, :, :width].to(device)
    own_rows = data.train.index[clients]
    rows = torch.gather(own_rows[:, None, :].expand(-1, epochs, -1), 2, order.clamp(max=own_rows.shape[1] - 1))
    rows = rows.view(n, epochs, len(active), batch).permute(1, 2, 0, 3).contiguous()
    mask = (torch.arange(width, device=device) < plan.counts.to(device)[:, None]).float()
    mask = mask.view(n, len(active), batch).transpose(0, 1).contiguous()

    grad_fn = vmap(grad(_masked_mse(model)))
    moments = None
    if optimizer == "adam":
        moments = ({k: torch.zeros_like(v) for k, v in params.items()}, {k: torch.zeros_like(v) for k, v in params.items()})
        t = torch.zeros(n, device=device, dtype=torch.float64)  # bias corrections in double, as Adam's Python floats
    for e in range(epochs):
        for s, k in enumerate(active):
            idx = rows[e, s, :k]
            x = data.x.index_select(0, idx.reshape(-1)).view(*idx.shape, *data.x.shape[1:])
            with torch.enable_grad():
                grads = grad_fn({name: p[:k] for name, p in params.items()}, x, mask[s, :k])
            if moments is None:
                torch._foreach_add_([p[:k] for p in params.values()], list(grads.values()), alpha=-lr)
                continue
            t[:k] += 1
            beta1, beta2 = _ADAM_BETAS
            step_size = (lr / (1 - beta1 ** t[:k])).to(data.x.dtype)  # [k]: torch.optim.Adam's, per client
            bias2_sqrt = (1 - beta2 ** t[:k]).sqrt().to(data.x.dtype)
            for name, g in grads.items():
                p, m, v = params[name][:k], moments[0][name][:k], moments[1][name][:k]
                shape = (k,) + (1,) * (g.dim() - 1)
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (v.sqrt() / bias2_sqrt.view(shape)).add_(_ADAM_EPS)
                p.sub_(step_size.view(shape) * m / denom)
    return params


@torch.no_grad()
def _encode_stacked(model: ConvAE, params: dict, data: FederatedData, clients, samples: int = ENCODE_ROWS) -> list[np.ndarray]:
    """Embeddings of every client's training samples with its own row of the stacked ``params``, about
    ``samples`` images a pass (the same number of each client's)."""
    enc = {k.removeprefix("encoder."): v for k, v in params.items() if k.startswith("encoder.")}
    encode = vmap(lambda p, x: functional_call(model.encoder, p, (x,)))
    own_rows, counts = data.train.index[clients], data.train.counts[clients].tolist()
    width = max(1, samples // len(clients))
    parts = []
    for lo in range(0, own_rows.shape[1], width):
        idx = own_rows[:, lo : lo + width]
        x = data.x.index_select(0, idx.reshape(-1)).view(*idx.shape, *data.x.shape[1:])
        parts.append(encode(enc, x))
    emb = torch.cat(parts, dim=1)
    return [emb[c, :k].cpu().numpy() for c, k in enumerate(counts)]

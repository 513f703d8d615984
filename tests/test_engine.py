"""The vectorised local-training engine against the per-client reference loop, one SGD step
against a hand computation, and the batch plan's properties.

CUDA variants run where a GPU is present (CUDA graphs are then in play) and skip elsewhere.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import fedbench.engine.vectorised as vectorised
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.evaluate import evaluate_clients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.engine.wide_model import wide_forward, wide_input, wide_weights, widen
from fedbench.models import build_model

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
FEATURES, CLASSES = 6, 4


@pytest.fixture(autouse=True)
def full_precision_convolutions(monkeypatch):
    """cuDNN convolutions in TF32 (PyTorch's default on Ampere and later) round to 10 mantissa bits,
    which a grouped and a per-client convolution round differently; the comparisons here are FP32's."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


def make_data(counts: list[int], device="cpu", seed: int = 0) -> FederatedData:
    """Random features and labels; client k owns ``counts[k]`` rows scattered over the data."""
    gen = torch.Generator().manual_seed(seed)
    total = sum(counts) + 3  # a few rows nobody owns
    x = torch.randn(total, FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (total,), generator=gen)
    perm = np.random.default_rng(seed).permutation(total)
    lists = np.split(perm[: sum(counts)], np.cumsum(counts)[:-1])
    index = ClientIndex.from_lists(lists, device)
    return FederatedData(x.to(device), y.to(device), index, index, CLASSES)


def mlp() -> nn.Module:  # eligible for the hand-written step
    return nn.Sequential(nn.Flatten(), nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, CLASSES))


def perturbed_start(model: nn.Module, n: int, seed: int) -> dict[str, torch.Tensor]:
    """Stacked weights whose rows differ, so that a row mix-up would show."""
    gen = torch.Generator().manual_seed(seed)
    return {
        k: v + 0.1 * torch.randn(v.shape, generator=gen).to(v.device) if v.is_floating_point() else v
        for k, v in broadcast(model_weights(model), n).items()
    }


def run_both(model, data, hp: LocalSGD, seed: int = 1, center=None, **trainer_kw):
    device = data.x.device
    torch.manual_seed(seed)
    n = data.num_clients
    start = {k: v.to(device) for k, v in perturbed_start(model, n, seed).items()}
    center = None if center is None else {k: v.to(device) for k, v in center.items()}
    clients = torch.arange(n, device=device)
    plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, torch.Generator().manual_seed(seed))
    got = VectorisedTrainer(model, data, **trainer_kw).train(start, clients, plan, hp, center)
    want = ReferenceTrainer(model, data).train(start, clients, plan, hp, center)
    return got, want, start


def assert_same(got, want, atol=1e-5):
    (w_got, loss_got), (w_want, loss_want) = got, want
    assert w_got.keys() == w_want.keys()
    for k in w_want:
        assert w_got[k].shape == w_want[k].shape, k
        torch.testing.assert_close(w_got[k], w_want[k], atol=atol, rtol=1e-4, msg=k)
    torch.testing.assert_close(loss_got, loss_want, atol=atol, rtol=1e-4)


PLAIN = LocalSGD(epochs=2, batch_size=8, lr=0.1)
ALL_TERMS = LocalSGD(epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=1e-2, prox_mu=0.5)
NO_MOMENTUM = LocalSGD(epochs=2, batch_size=8, lr=0.1, weight_decay=1e-2, prox_mu=0.5)
EQUAL_TERMS = LocalSGD(epochs=2, batch_size=8, lr=0.1, momentum=0.9, weight_decay=0.1, prox_mu=0.1)  # wd - mu = 0: both still apply


# the three step implementations of the trainer
STEPS = {"fused": {}, "wide": {"fused_mlp": False}, "vmap": {"fused_mlp": False, "wide": False}}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("chunk_size", [None, 3])
@pytest.mark.parametrize("hp", [PLAIN, NO_MOMENTUM, ALL_TERMS, EQUAL_TERMS],
                         ids=["sgd", "wd-prox", "momentum-wd-prox", "momentum-wd-equals-prox"])
def test_matches_reference(device, step, chunk_size, hp):
    """Unequal clients (a zero-sample one, short last batches, 1 to 9 steps per epoch), 2 epochs,
    chunks that cut the step-sorted order, weight decay + prox about a separate center (also with
    equal coefficients), with and without momentum; neither trainer changes the weights of the model it
    was given (the vectorised one moves it to the data's device)."""
    counts = [37, 5, 20, 0, 64, 13, 24, 70]
    model = mlp()
    given = model_weights(model)
    data = make_data(counts, device)
    center = perturbed_start(model, len(counts), seed=7)
    got, want, start = run_both(model, data, hp, center=center, chunk_size=chunk_size, **STEPS[step])
    assert_same(got, want)
    assert all(torch.equal(v.cpu(), given[k]) for k, v in model_weights(model).items())
    for k in start:  # training moved every client with data, and only those
        moved = (got[0][k] - start[k]).flatten(1).abs().amax(1) > 0
        assert moved.tolist() == [c > 0 for c in counts], k
    assert got[1][3] == 0 and torch.all(got[1][[0, 1, 2, 4]] > 0)


def test_the_hand_written_step_takes_only_biased_linear_relu_stacks():
    """``fused_mlp.linear_stack``: ``[Flatten,] Linear, ReLU, ..., Linear`` with biases (the Flatten needed
    unless the samples are 1-D) gives its layers' (weight, bias) names; anything else gives None and
    takes the generic step."""
    from fedbench.engine.fused_mlp import linear_stack

    flat = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    assert linear_stack(flat, input_dims=2) == [("1.weight", "1.bias"), ("3.weight", "3.bias")]
    vectors = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    assert linear_stack(vectors, input_dims=1) == [("0.weight", "0.bias"), ("2.weight", "2.bias")]
    assert linear_stack(vectors, input_dims=2) is None  # images need the Flatten
    for other in (nn.Sequential(nn.Flatten(), nn.Linear(4, 3, bias=False), nn.ReLU(), nn.Linear(3, 2)),
                  nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)),
                  nn.Sequential(nn.Flatten(start_dim=2), nn.Linear(4, 2))):
        assert linear_stack(other, input_dims=2) is None


def test_the_hand_written_step_takes_dropout_beside_a_hidden_relu():
    """``fused_mlp.dropout_stack``: a Dropout before or after a hidden ReLU (FLT's ``mlp_dropout``:
    Linear, Dropout, ReLU, Linear) gives the layers and each hidden layer's probability;
    ``linear_stack`` (the deterministic gradients' path) still refuses a model that drops."""
    from fedbench.engine.fused_mlp import dropout_stack, linear_stack

    flt = build_model({"arch": "mlp_dropout", "hidden": 16}, (1, 4, 4), CLASSES)
    assert dropout_stack(flt, input_dims=3) == ([("1.weight", "1.bias"), ("4.weight", "4.bias")], [0.5])
    after = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Dropout(0.2), nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    assert dropout_stack(after, input_dims=1) == ([("0.weight", "0.bias"), ("3.weight", "3.bias"), ("5.weight", "5.bias")], [0.2, 0.0])
    assert linear_stack(flt, input_dims=3) is None and linear_stack(after, input_dims=1) is None
    for other in (nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.2), nn.Linear(3, 2)),  # no ReLU beside it
                  nn.Sequential(nn.Dropout(0.2), nn.Linear(4, 2)),  # dropout on the input
                  nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2), nn.Dropout(0.2))):
        assert dropout_stack(other, input_dims=1) is None
    assert VectorisedTrainer(flt, make_images([4], shape=(1, 4, 4))).step_kind == "fused_mlp"


class ReplayDropout(nn.Module):
    """Dropout that applies recorded masks in order: ``masks[client][step]``, the reference trainer
    taking client after client, step after step."""

    def __init__(self, masks: list[list[torch.Tensor]], p: float):
        super().__init__()
        self.masks, self.p, self.calls = masks, p, 0

    def forward(self, x):
        steps = len(self.masks[0])
        mask = self.masks[self.calls // steps][self.calls % steps]
        self.calls += 1
        return x * mask / (1 - self.p)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hp", [PLAIN, ALL_TERMS], ids=["sgd", "momentum-wd-prox"])
def test_hand_written_dropout_step_matches_autograd_with_the_same_masks(monkeypatch, hp, device):
    """The hand-written step of a model with dropout against the reference loop (autograd,
    ``torch.optim.SGD``) through the same masks: the ones the step drew, recorded and replayed
    client after client (equal counts, one chunk: client c is row c at every step).  The masks
    differ between clients and steps and drop about p of the units.  (CUDA graphs off: a replayed
    graph draws without calling the recorder.)"""
    import fedbench.engine.fused_mlp as fused_mlp

    p, hidden, counts = 0.5, 16, [24, 24, 24]
    drawn, draw = [], fused_mlp.dropout_mask
    monkeypatch.setattr(fused_mlp, "dropout_mask", lambda z, q: drawn.append(draw(z, q)) or drawn[-1])
    model = nn.Sequential(nn.Flatten(), nn.Linear(FEATURES, hidden), nn.Dropout(p), nn.ReLU(), nn.Linear(hidden, CLASSES))
    data = make_data(counts, device)
    torch.manual_seed(1)
    start = {k: v.to(device) for k, v in perturbed_start(model, len(counts), seed=1).items()}
    clients = torch.arange(len(counts), device=device)
    plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, torch.Generator().manual_seed(1))
    got = VectorisedTrainer(model, data, cuda_graphs=False).train(start, clients, plan, hp)
    steps = hp.epochs * counts[0] // hp.batch_size
    assert len(drawn) == steps and drawn[0].shape == (len(counts), hp.batch_size, hidden)
    keep = torch.stack(drawn).float().mean().item()
    assert 0.35 < keep < 0.65 and not torch.equal(drawn[0][0], drawn[0][1]) and not torch.equal(drawn[0], drawn[1])
    replay = nn.Sequential(*[ReplayDropout([[m[c] for m in drawn] for c in range(len(counts))], p) if isinstance(layer, nn.Dropout)
                             else layer for layer in model])
    want = ReferenceTrainer(replay, data).train(start, clients, plan, hp)
    assert_same(got, want)


@pytest.mark.parametrize("step", ["wide", "vmap"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_generic_model_matches_reference(step, bias):
    """A model the hand-written step does not cover (Tanh; a Linear without bias) takes the wide or the
    vmap path."""
    model = nn.Sequential(nn.Linear(FEATURES, 12, bias=bias), nn.Tanh(), nn.Linear(12, CLASSES))
    trainer = VectorisedTrainer(model, make_data([4]), **STEPS[step])
    assert trainer.step_kind == step
    got, want, _ = run_both(model, make_data([17, 9, 30]), ALL_TERMS, **STEPS[step])
    assert_same(got, want)


# unequal clients: short last batches (10, 13, 21 and 5 are not multiples of 8; none of 1 sample,
# which BatchNorm1d refuses in training), two clients with
# equal counts (a shared sub-step), one client with a single short batch, one with no data
BN_COUNTS = [21, 16, 10, 0, 13, 13, 5, 32]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("step", ["wide", "vmap"])
@pytest.mark.parametrize("counts", [[40, 16, 24, 8], BN_COUNTS], ids=["full-batches", "short-batches"])
def test_batchnorm_matches_reference(device, step, counts):
    """BatchNorm buffers too (running stats, num_batches_tracked): padding never enters a batch's
    statistics, because short batches run as sub-steps of their own."""
    model = nn.Sequential(nn.Linear(FEATURES, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, CLASSES))
    got, want, start = run_both(model, make_data(counts, device), ALL_TERMS, **STEPS[step])
    assert_same(got, want)
    steps = [ALL_TERMS.epochs * math.ceil(c / ALL_TERMS.batch_size) for c in counts]
    assert got[0]["1.num_batches_tracked"].tolist() == steps
    trained = [c > 0 for c in counts]
    moved = (got[0]["1.running_mean"] - start["1.running_mean"].to(device)).abs().amax(1) > 0
    assert moved.tolist() == trained


class ResidualNet(nn.Module):
    """A ResNet-style network: conv-BN stem, one BasicBlock with a strided 1x1 shortcut, global
    average pooling (its own forward, with functional ReLU and a residual addition)."""

    def __init__(self, channels=3, classes=CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU())
        self.conv1 = nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.shortcut = nn.Sequential(nn.Conv2d(4, 6, 1, stride=2, bias=False), nn.BatchNorm2d(6))
        self.fc = nn.Linear(6, classes)

    def forward(self, x):
        x = self.stem(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1))


def vgg_block() -> nn.Module:
    """A VGG-style stack: conv-BN-ReLU twice, max-pool, a BN'd classifier with dropout off."""
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.0), nn.Linear(12, CLASSES),
    )


def make_images(counts: list[int], shape=(3, 8, 8), device="cpu", seed: int = 0) -> FederatedData:
    gen = torch.Generator().manual_seed(seed)
    total = sum(counts)
    x = torch.randn(total, *shape, generator=gen)
    y = torch.randint(0, CLASSES, (total,), generator=gen)
    index = ClientIndex.from_lists(np.split(np.arange(total), np.cumsum(counts)[:-1]), device)
    return FederatedData(x.to(device), y.to(device), index, index, CLASSES)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("step", ["wide", "vmap"])
@pytest.mark.parametrize("build", [ResidualNet, vgg_block], ids=["residual", "vgg"])
def test_conv_batchnorm_matches_reference(device, step, build):
    """Convolutional BatchNorm models, parameters and buffers, unequal clients with short last
    batches, momentum, weight decay and prox; the wide model is what the trainer picks."""
    model = build()
    data = make_images(BN_COUNTS, device=device)
    assert VectorisedTrainer(model, data, **STEPS[step]).step_kind == step
    got, want, _ = run_both(model, data, ALL_TERMS, **STEPS[step])
    assert_same(got, want, atol=2e-5)


def test_the_fold_check_leaves_the_global_random_stream_alone():
    """``widen`` proves the fold on probe weights and inputs drawn from its own seeded generator:
    torch's global stream (model initialisation, dropout masks) stays where it was, so a seed gives
    the same numbers whether or not a trainer checked its model."""
    model = ResidualNet()
    torch.manual_seed(3)
    before = torch.get_rng_state()
    assert widen(model, (3, 8, 8)) is not None
    assert torch.equal(torch.get_rng_state(), before)


def test_step_schedule_by_hand():
    """Counts 21, 16, 13, 13, 5 (sorted), batch 8, i.e. batches 8+8+5, 8+8, 8+5, 8+5, 5: step 0 --
    four full batches, then the client of 5 alone; step 1 -- 21 and 16 full, the two 13s share a
    sub-step of 5; step 2 -- 21's last 5.  Without exactness every step is one padded slice."""
    counts = [21, 16, 13, 13, 5]
    assert vectorised.step_schedule(counts, 8, exact=True) == [[(0, 4, 8), (4, 5, 5)], [(0, 2, 8), (2, 4, 5)], [(0, 1, 5)]]
    assert vectorised.step_schedule(counts, 8, exact=False) == [[(0, 5, 8)], [(0, 4, 8)], [(0, 1, 8)]]
    assert vectorised.step_schedule([], 8, exact=True) == [] == vectorised.step_schedule([], 8, exact=False)  # no client


class ChannelMixer(nn.Module):
    """Softmax over channels mixes the folded clients: the wide model must be refused."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)
        self.fc = nn.Linear(2 * 8 * 8, CLASSES)

    def forward(self, x):
        return self.fc(torch.softmax(self.conv(x), 1).flatten(1))


class OffsetChannelMixer(ChannelMixer):
    """Logits near 10 (the bias), which the mixing moves by a few per cent only: still refused (the
    fold check allows float rounding, not errors of a few per cent)."""

    def __init__(self):
        super().__init__()
        nn.init.constant_(self.fc.bias, 10.0)


class EvalModeChannelMixer(ChannelMixer):
    """Mixes channels in evaluation mode only: the fold check must run the evaluation mode too."""

    def forward(self, x):
        h = self.conv(x)
        return self.fc((h if self.training else h - h.mean(1, keepdim=True)).flatten(1))


class RunningStatsAcrossClients(ChannelMixer):
    """A BatchNorm (running statistics only) fed the channels rolled by one, its output unused: the
    logits fold, but in the wide model one client's channel lands in the other's running
    statistics -- only the check of the running statistics after a training-mode pass refuses it."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(2, affine=False)

    def forward(self, x):
        h = self.conv(x)
        self.bn(h.roll(1, 1))
        return self.fc(h.flatten(1))


@pytest.mark.parametrize(
    "model",
    [ChannelMixer(), nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(4 * 6 * 6, CLASSES)),
     OffsetChannelMixer(), EvalModeChannelMixer(), RunningStatsAcrossClients(),
     nn.Sequential(nn.Linear(8, 5), nn.Flatten(), nn.Linear(3 * 8 * 5, CLASSES)),
     nn.Sequential(nn.Conv2d(3, 4, 3), nn.PReLU(4), nn.Flatten(), nn.Linear(4 * 6 * 6, CLASSES))],
    ids=["channel-mixing-forward", "groupnorm", "mixing-by-a-few-per-cent", "mixing-in-eval-mode-only",
         "running-stats-across-clients", "linear-over-the-last-axis", "unknown-layer-prelu"],
)
def test_unfoldable_models_take_vmap(model):
    """``widen`` refuses them and the trainer takes vmap: a forward that mixes the folded clients'
    channels (strongly, by a few per cent, in evaluation mode only, or only in a BatchNorm's running
    statistics), a GroupNorm, a Linear over the last axis of image samples (the wide Linear raises
    on it: an error in the check means refusal), and a layer with parameters that ``widen`` does not
    know (a channel-wise PReLU: refused as documented, although it happens to fold)."""
    trainer = VectorisedTrainer(model, make_images([9, 4]))
    assert trainer.step_kind == "vmap"
    got, want, _ = run_both(model, make_images([9, 4]), ALL_TERMS)
    assert_same(got, want)


def test_widen_refuses_a_cumulative_batchnorm():
    """``BatchNorm(momentum=None)`` weights batch t by 1/t, counted in ``num_batches_tracked`` -- a
    counter the wide model keeps only as a scratch scalar; the first batch would pass the check."""
    model = nn.Sequential(nn.Linear(FEATURES, 10), nn.BatchNorm1d(10, momentum=None), nn.ReLU(), nn.Linear(10, CLASSES))
    assert widen(model, (FEATURES,)) is None


def test_a_batchnorm_model_with_small_running_variances_folds():
    """Running variances of 1e-3 (as after training on small activations): the fold check's
    perturbed copies keep every client's variance positive, so the check does not fail on NaNs."""
    model = nn.Sequential(nn.Linear(FEATURES, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, CLASSES))
    model[1].running_var.fill_(1e-3)
    assert widen(model, (FEATURES,)) is not None


@pytest.mark.parametrize("build", [ResidualNet, vgg_block], ids=["bias-free-convs", "biased-convs"])
def test_the_wide_twin_keeps_the_models_names(build):
    """``widen``'s twin has the model's parameter and buffer names (its Conv2d and Linear weights
    and biases included), the names the stacked client weights are called with."""
    model = build()
    wide = widen(model, (3, 8, 8))
    assert [n for n, _ in wide.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert [n for n, _ in wide.named_buffers()] == [n for n, _ in model.named_buffers()]


def test_wide_input_by_hand():
    """Client j's b-th sample lands in row b of the wide input, in client j's block of channels:
    rows ``idx = [[0, 1, 2], [5, 4, 3]]`` of 6 samples of 2 features, and of 6 scalar samples."""
    idx = torch.tensor([[0, 1, 2], [5, 4, 3]])
    features = torch.arange(12.0).view(6, 2)  # sample i: [2i, 2i + 1]
    expected = torch.tensor([[0.0, 1, 10, 11], [2, 3, 8, 9], [4, 5, 6, 7]])
    assert torch.equal(wide_input(features, idx), expected)
    scalars = torch.arange(6.0) * 10  # sample i: 10 i
    assert torch.equal(wide_input(scalars, idx), torch.tensor([[0.0, 50], [10, 40], [20, 30]]))


def test_the_trainer_picks_its_step():
    """Linear/ReLU stacks take the hand-written step (a leading Flatten optional for vector samples)
    unless ``fused_mlp=False``, then the wide model unless ``wide=False``, then vmap; ``step_kind``
    names the step (the benchmarks report it)."""
    data = make_data([4])
    assert VectorisedTrainer(mlp(), data).step_kind == "fused_mlp"
    no_flatten = nn.Sequential(nn.Linear(FEATURES, 8), nn.ReLU(), nn.Linear(8, CLASSES))
    assert VectorisedTrainer(no_flatten, data).step_kind == "fused_mlp"
    assert VectorisedTrainer(mlp(), data, fused_mlp=False).step_kind == "wide"
    assert VectorisedTrainer(mlp(), data, fused_mlp=False, wide=False).step_kind == "vmap"


def test_training_after_an_evaluation_matches_reference():
    """Evaluation runs the wide twin it shares with the trainer in evaluation mode; the next
    training must switch it back (BatchNorm on batch statistics, running statistics updated)."""
    model = nn.Sequential(nn.Linear(FEATURES, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, CLASSES))
    data = make_data([16, 24, 8])
    trainer = VectorisedTrainer(model, data, fused_mlp=False)
    assert trainer.step_kind == "wide"
    start = perturbed_start(model, 3, seed=1)  # distinct clients: evaluated through the wide twin
    evaluate_clients(model, start, data, data.test, torch.arange(3))
    plan = make_batch_plan(data.train.counts, 2, 8, torch.Generator().manual_seed(1))
    got = trainer.train(start, torch.arange(3), plan, ALL_TERMS)
    want = ReferenceTrainer(model, data).train(start, torch.arange(3), plan, ALL_TERMS)
    assert_same(got, want)


def test_small_cpu_chunks_match_reference(monkeypatch):
    """The CPU default chunking of the hand-written step (forced down to 2 clients per chunk)."""
    model = mlp()
    per_client = sum(p.nbytes for p in model.parameters())
    monkeypatch.setattr(vectorised, "_CPU_CHUNK_BYTES", 2 * per_client)
    data = make_data([11, 30, 3, 25, 8])
    assert VectorisedTrainer(model, data)._default_chunk(perturbed_start(model, 5, 0), 5) == 2
    got, want, _ = run_both(model, data, ALL_TERMS)
    assert_same(got, want)


@pytest.mark.parametrize("fused_mlp", [True, False], ids=["fused", "vmap"])
@pytest.mark.parametrize("trainer", [VectorisedTrainer, ReferenceTrainer])
def test_one_step_by_hand(trainer, fused_mlp):
    """MLR from zero, one client, one batch of two samples, 3 classes: softmax(0) = 1/3, so
    grad_b = mean_i (1/3 - onehot(y_i)) and grad_W = mean_i (1/3 - onehot(y_i)) x_i^T.

    x = [[1, 2], [3, 0]], y = [0, 1]:
      grad_b = [-1/6, -1/6, 1/3]
      grad_W = [[1/6, -2/3], [-5/6, 1/3], [2/3, 1/3]]
    one step with lr 0.3 from zero gives -0.3 * grad; the loss is ln 3.
    """
    index = ClientIndex.from_lists([np.array([0, 1])], "cpu")
    data = FederatedData(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([0, 1]), index, index, 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 3))
    start = {k: torch.zeros(1, *v.shape) for k, v in model.state_dict().items()}
    hp = LocalSGD(epochs=1, batch_size=2, lr=0.3, momentum=0.9)  # momentum: the first step is plain SGD
    plan = make_batch_plan(data.train.counts, 1, 2, torch.Generator().manual_seed(0))
    kw = {"fused_mlp": fused_mlp} if trainer is VectorisedTrainer else {}
    weights, loss = trainer(model, data, **kw).train(start, torch.tensor([0]), plan, hp)
    expected_w = torch.tensor([[[-0.05, 0.2], [0.25, -0.1], [-0.2, -0.1]]])
    torch.testing.assert_close(weights["1.weight"], expected_w, atol=1e-7, rtol=0)
    torch.testing.assert_close(weights["1.bias"], torch.tensor([[0.05, 0.05, -0.1]]), atol=1e-7, rtol=0)
    assert loss.item() == pytest.approx(math.log(3), abs=1e-6)


def test_compile_failure_falls_back_to_eager(monkeypatch):
    """``compile=True`` whose compilation fails warns once and then trains eagerly, still exactly."""

    def broken_compile(fn, *args, **kwargs):
        def compiled(*a, **k):
            raise RuntimeError("no compiler here")

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    model = nn.Sequential(nn.Linear(FEATURES, 12), nn.Tanh(), nn.Linear(12, CLASSES))
    with pytest.warns(UserWarning, match="running eagerly"):
        got, want, _ = run_both(model, make_data([17, 9]), ALL_TERMS, compile=True)
    assert_same(got, want)


def test_batch_plan_properties():
    counts = torch.tensor([50, 7, 0, 23])
    plan = make_batch_plan(counts, 3, 10, torch.Generator().manual_seed(5))
    again = make_batch_plan(counts, 3, 10, torch.Generator().manual_seed(5))
    other = make_batch_plan(counts, 3, 10, torch.Generator().manual_seed(6))
    assert torch.equal(plan.order, again.order)  # reproducible from the seed
    assert not torch.equal(plan.order[0], other.order[0])
    assert plan.epochs == 3 and plan.steps_per_epoch.tolist() == [5, 1, 0, 3]
    for c, n in enumerate(counts.tolist()):
        for e in range(3):
            assert torch.equal(plan.order[c, e, :n].sort().values, torch.arange(n))  # a permutation
        if n > 1:  # fresh order every epoch
            assert not torch.equal(plan.order[c, 0, :n], plan.order[c, 1, :n])
            assert not torch.equal(plan.order[c, 1, :n], plan.order[c, 2, :n])
        batches = plan.client_batches(c)
        sizes = [len(b) for b in batches]
        per_epoch = [10] * (n // 10) + ([n % 10] if n % 10 else [])
        assert sizes == per_epoch * 3  # DataLoader(shuffle=True, drop_last=False) batches
        if n:
            assert torch.equal(torch.cat(batches[: len(per_epoch)]), plan.order[c, 0, :n])


def test_batch_plan_of_no_clients_and_of_single_samples():
    """No clients: an empty plan (batch 1).  Clients of at most one sample: orders one position
    wide (``[C, E, largest count]``), one batch of the one sample per epoch."""
    empty = make_batch_plan(torch.zeros(0, dtype=torch.long), 2, 8, torch.Generator().manual_seed(0))
    assert empty.order.shape == (0, 2, 1) and empty.batch_size == 1 and empty.steps_per_epoch.tolist() == []
    plan = make_batch_plan(torch.tensor([1, 0]), 2, 8, torch.Generator().manual_seed(0))
    assert plan.order.shape == (2, 2, 1) and plan.batch_size == 1 and plan.steps_per_epoch.tolist() == [1, 0]
    assert [b.tolist() for b in plan.client_batches(0)] == [[0], [0]] and plan.client_batches(1) == []


@pytest.mark.parametrize("step", ["wide", "vmap"])
def test_resnet9_matches_reference(step):
    """FeMAM's ResNet-9 (BatchNorm in every block, residual shortcuts), 32x32 inputs, unequal
    clients with short last batches, momentum, weight decay and prox."""
    model = build_model({"arch": "resnet9"}, (3, 32, 32), CLASSES)
    counts = [12, 5, 0, 9, 9]
    data = make_images(counts, shape=(3, 32, 32))
    hp = LocalSGD(epochs=1, batch_size=4, lr=0.05, momentum=0.9, weight_decay=1e-3, prox_mu=0.1)
    got, want, _ = run_both(model, data, hp, **STEPS[step])
    assert_same(got, want, atol=5e-5)


@pytest.mark.parametrize(
    "arch, shape",
    [("fedavg_cnn", (1, 28, 28)), ("leaf_cnn", (1, 28, 28)), ("fedmr_cnn", (3, 32, 32)), ("fedmr_femnist_cnn", (1, 28, 28)),
     ("resnet9", (3, 64, 64)), ("resnet20", (3, 32, 32)), ("vgg16", (3, 32, 32)), ("lenet_cifar", (3, 32, 32)),
     ("fedmr_vgg16_mnist", (1, 28, 28)), ("pfedme_cnn", (1, 28, 28)), ("mlp_dropout", (1, 28, 28))],
)
def test_paper_models_fold_into_the_wide_step(arch, shape):
    """Every convolutional model of the papers runs as one wide model: its logits for two clients with
    different weights equal each client's own model called on its own samples (evaluation mode)."""
    torch.manual_seed(0)
    model = build_model({"arch": arch}, shape, 10).eval()
    wide = widen(model, shape)
    assert wide is not None
    params = dict(model.named_parameters())
    clients = [{k: v + 0.05 * torch.randn_like(v) if k in params else v for k, v in model.state_dict().items()} for _ in range(2)]
    x = torch.randn(6, *shape)  # client c's samples: rows 3c, 3c + 1, 3c + 2
    with torch.no_grad():
        expected = torch.stack([torch.func.functional_call(model, clients[c], (x[3 * c : 3 * c + 3],)) for c in range(2)])
        stacked = {k: torch.stack([client[k] for client in clients]) for k in clients[0]}
        got = wide_forward(wide.eval(), wide_weights(stacked), wide_input(x, torch.arange(6).view(2, 3)), 2)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-3)  # float32 sums in another order (VGG's logits ~ 20)

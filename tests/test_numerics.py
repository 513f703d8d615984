"""Precision, layout, cuDNN autotuning and compilation as training settings (fedbench.engine.numerics).

bf16 autocast runs on the CPU too, so its distance from FP32 is checked here: one SGD step of a
linear softmax model against a bound derived from bfloat16's rounding, and a looser check over a
few epochs of a convolutional BatchNorm model.  channels_last gives FP32's numbers up to rounding;
the defaults leave a run's numbers, hyperparameters and fingerprint as they were; bad values and
combinations that cannot work are refused when the config is checked."""

from __future__ import annotations

import copy
import json
from functools import partial

import pytest
import torch
from torch import nn

from fedbench.config.cells import Cell, ConfigError, results_settings, resolve_cell
from fedbench.config.checks import check_entries
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.device_gradient import MinibatchGradients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.numerics import Numerics
from fedbench.engine.reference import ReferenceTrainer
from fedbench.engine.step_runner import EagerFallback
from fedbench.engine.vectorised import VectorisedTrainer
from fedbench.engine.weights import broadcast, model_weights
from fedbench.run.partition_job import build_partition
from fedbench.run.job import cell_job
from fedbench.run.stages import run_cell
from fedbench.planning.validate import validate_config
from conftest import tiny_digits_config

U = 2.0**-8  # bfloat16: 8 significant bits, round to nearest -> relative error at most 2^-8 per rounding
G32 = 2.0**-24  # FP32's unit roundoff (accumulations inside the products are FP32)


def linear_data(clients: int, batch: int, features: int, classes: int, seed: int = 0) -> FederatedData:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(clients * batch, features, generator=gen)
    y = torch.randint(0, classes, (clients * batch,), generator=gen)
    index = ClientIndex.from_lists([list(range(c * batch, (c + 1) * batch)) for c in range(clients)], "cpu")
    return FederatedData(x, y, index, index, classes)


def one_round(model, data, numerics, hp, start, trainer=VectorisedTrainer, seed=1, fp32_convolutions=False):
    """One round of every client from ``start``, under the run's flags (PyTorch's defaults unless ``tf32``).
    ``fp32_convolutions``: cuDNN's convolutions in FP32 too (the defaults let them run in TF32 on CUDA)."""
    device = data.x.device
    plan = make_batch_plan(data.train.counts, hp.epochs, hp.batch_size, torch.Generator().manual_seed(seed))
    clients = torch.arange(data.num_clients, device=device)
    with (numerics or Numerics()).backends():
        if fp32_convolutions:
            torch.backends.cudnn.allow_tf32 = False  # backends() restores the flag on exit
        return trainer(model.to(device), data, numerics=numerics).train(
            {k: v.clone().to(device) for k, v in start.items()}, clients, plan, hp)


def on(data: FederatedData, device: str) -> FederatedData:
    index = ClientIndex(data.train.index.to(device), data.train.counts.to(device))
    return FederatedData(data.x.to(device), data.y.to(device), index, index, data.num_classes)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")


@CUDA
@pytest.mark.parametrize("setting", ["bf16", "bf16+cl", "fp32+cl", "tf32"])
def test_cuda_settings_with_cuda_graphs_stay_near_fp32(conv_case, setting):
    """On the GPU, 6 epochs so that the recurring step shapes run as CUDA graphs: bf16 (with and
    without channels_last) within the CPU check's loose bound of FP32, TF32 too (11 bits, looser
    than FP32, tighter than bf16), and so is fp32+cl here: under PyTorch's default flags, which
    ``fp32`` keeps, cuDNN may run either layout's convolutions in TF32, so the two layouts need not
    agree closer than TF32 does (apart/moved 0.0157 on an H200, 2026-11-27).  That channels_last
    itself costs no more than FP32 rounding is checked with TF32 off, against a measured reference:
    :func:`test_channels_last_in_fp32_within_a_measured_rounding_reference`."""
    model, data, start, hp = conv_case
    model = copy.deepcopy(model)  # the fixture's stays on the CPU
    hp = LocalSGD(epochs=6, batch_size=hp.batch_size, lr=hp.lr, momentum=hp.momentum)
    data = on(data, "cuda")
    numerics = Numerics.parse(setting)
    (w32, loss32), (got, loss) = (one_round(model, data, n, hp, start) for n in (Numerics(), numerics))
    params = [n for n, _ in model.named_parameters()]
    moved = torch.cat([(w32[n] - start[n].cuda()).flatten() for n in params]).norm()
    apart = torch.cat([(got[n] - w32[n]).flatten() for n in params]).norm()
    assert apart < 0.2 * moved, float(apart / moved)
    assert torch.allclose(loss, loss32, rtol=0.02)


def nudged(start: dict, params: list[str], seed: int) -> dict:
    """``start`` with every parameter moved one FP32 ulp up or down, at random (torch.nextafter):
    the smallest change of a start FP32 can represent.  Buffers as they are."""
    gen = torch.Generator().manual_seed(seed)
    out = dict(start)
    for name in params:
        v = start[name]
        up = torch.randint(0, 2, v.shape, generator=gen).bool().to(v.device)
        out[name] = torch.nextafter(v, torch.where(up, torch.inf, -torch.inf).to(v.dtype))
    return out


LAYOUT_FACTOR = 10  # channels_last's FP32 divergence may be this many times the measured rounding reference
NUDGES = 3  # reference draws (their largest counts)


def fp32_layout_divergence(model, data, start, hp, nudges: int = NUDGES) -> dict:
    """Distances after one round (weights only, buffers left out) from the contiguous FP32 run, all
    in FP32 with TF32 off (``fp32_convolutions``): of the channels_last run (``apart``), of
    contiguous runs from ``nudges`` starts one ulp away (``reference``: the largest), and of the
    start (``moved``); ``floor`` = 2^-23 ||w||, one ulp of every weight."""
    params = [n for n, _ in model.named_parameters()]
    run = partial(one_round, model, data, hp=hp, fp32_convolutions=True)
    w32, _ = run(Numerics(), start=start)

    def dist(w):
        return float(torch.cat([(w[n] - w32[n]).flatten() for n in params]).norm())

    wcl, _ = run(Numerics(channels_last=True), start=start)
    return {"apart": dist(wcl),
            "reference": max(dist(run(Numerics(), start=nudged(start, params, seed))[0]) for seed in range(nudges)),
            "moved": dist({n: start[n].to(w32[n].device) for n in params}),
            "floor": 2.0**-23 * float(torch.cat([w32[n].flatten() for n in params]).norm())}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_channels_last_in_fp32_within_a_measured_rounding_reference(conv_case, device):
    """channels_last runs other kernels (NHWC convolutions and BatchNorm, other summation orders),
    so after 6 epochs (18 momentum-SGD steps through BatchNorm, as the CUDA settings test; on CUDA
    the recurring steps replayed as CUDA graphs) its weights differ from the contiguous run's by
    FP32 rounding as this training amplifies it.  How much it amplifies is not derived but measured
    in the same test: the same FP32 run from a start moved by one ulp per parameter (the smallest
    rounding-sized change, :func:`nudged`), the largest of 3 draws, is the reference.  A change of
    layout rounds again at every step where the nudge rounds once, so it may exceed the reference;
    it may not exceed 10 times it (plus a floor of one ulp of every weight, for a training that
    would damp the nudge away).  TF32 is off for all of these runs: under PyTorch's default flags
    cuDNN may run convolutions in TF32 (10-bit mantissa), whose rounding is 2^12 times FP32's and
    would be checked against the wrong reference.  Measured on the CPU (2-core EPYC, torch 2.14):
    channels_last 6.1e-7 apart, reference 1.0e-6, floor 8.6e-7, against 1.85 moved; a start moved
    by TF32's rounding instead (2^-11 relative) ends 0.079 apart, far outside the bound."""
    model, data, start, hp = conv_case
    model = copy.deepcopy(model)
    hp = LocalSGD(epochs=6, batch_size=hp.batch_size, lr=hp.lr, momentum=hp.momentum)
    got = fp32_layout_divergence(model, on(data, device), start, hp)
    assert 0 < got["reference"] < 1e-4 * got["moved"], got  # the nudge really moved the end point, by rounding's order
    assert got["apart"] <= LAYOUT_FACTOR * got["reference"] + got["floor"], got


def test_one_bf16_sgd_step_of_a_linear_model_is_within_the_derived_bound():
    """One full-batch SGD step of softmax regression, z = W x + b, per client.

    Under bf16 autocast the wide step rounds x, W and b to bfloat16 (relative error u = 2^-8 each),
    multiplies with FP32 accumulation and rounds z to bfloat16 (u), so per sample s and class j
    |dz_sj| <= (3u + 3u^2 + F 2^-24) A_sj, A_sj = sum_i |W_ji x_si| + |b_j|.  With m_s = max_j |dz_sj|
    the softmax moves by |dp_sj| <= p_sj (e^(2 m_s) - 1).  The backward product G = d^T x
    (d = (p - onehot) / B, the mean loss's logit gradient, computed in FP32 from the FP32 logits)
    rounds d and x to bfloat16 and its result (u each):
      |dG_ji| <= (1 + u)^3 (sum_s |dp_sj| |x_si| / B + (3u + B 2^-24) D_ji) + u |G_ji|,  D = |d|^T |x|,
    and the bias gradient sum_s d_sj likewise without x.  The FP32 update W - lr G then differs from
    the exact one by at most lr |dG| plus FP32's own rounding.  The FP32 run must sit far inside the
    same bound, and the bf16 run must differ from FP32 by far more than FP32 from the exact step
    (autocast really ran)."""
    features, classes, batch, clients = 12, 5, 16, 3
    data = linear_data(clients, batch, features, classes)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(features, classes))
    gen = torch.Generator().manual_seed(2)
    start = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in broadcast(model_weights(model), clients).items()}
    hp = LocalSGD(epochs=1, batch_size=batch, lr=0.5)
    got = {p: one_round(model, data, Numerics(precision=p), hp, start)[0] for p in ("fp32", "bf16")}
    assert VectorisedTrainer(model, data, numerics=Numerics(precision="bf16")).step_kind == "wide"  # not the FP32-only MLP step

    errors = {"fp32": 0.0, "bf16": 0.0}
    for c in range(clients):
        x = data.x[c * batch : (c + 1) * batch].double()
        w, b = start["1.weight"][c].double(), start["1.bias"][c].double()
        p = (x @ w.T + b).softmax(-1)
        d = (p - torch.nn.functional.one_hot(data.y[c * batch : (c + 1) * batch], classes).double()) / batch
        g_w, g_b = d.T @ x, d.sum(0)
        exact_w, exact_b = w - hp.lr * g_w, b - hp.lr * g_b
        a = x.abs() @ w.abs().T + b.abs()
        m = ((3 * U + 3 * U * U + features * G32) * a).max(1).values
        dd = p * (torch.exp(2 * m)[:, None] - 1) / batch
        bound_w = hp.lr * ((1 + U) ** 3 * (dd.T @ x.abs() + (3 * U + batch * G32) * (d.abs().T @ x.abs())) + U * g_w.abs())
        bound_b = hp.lr * ((1 + U) ** 2 * (dd.sum(0) + (2 * U + batch * G32) * d.abs().sum(0)) + U * g_b.abs())
        bound_w += 4 * G32 * exact_w.abs()
        bound_b += 4 * G32 * exact_b.abs()
        for precision, weights in got.items():
            err_w = (weights["1.weight"][c].double() - exact_w).abs()
            err_b = (weights["1.bias"][c].double() - exact_b).abs()
            assert bool((err_w <= bound_w).all()) and bool((err_b <= bound_b).all()), (precision, c)
            errors[precision] = max(errors[precision], float(err_w.max()), float(err_b.max()))
        assert float(((got["fp32"]["1.weight"][c].double() - exact_w).abs() / bound_w).max()) < 1e-3
    assert errors["bf16"] > 100 * errors["fp32"]


class SmallConvNet(nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1)
        self.head = nn.Linear(8 * 4 * 4, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.head(torch.flatten(x, 1))


def image_data(counts, shape=(3, 8, 8), classes=4, seed=0) -> FederatedData:
    gen = torch.Generator().manual_seed(seed)
    total = sum(counts)
    x, y = torch.randn(total, *shape, generator=gen), torch.randint(0, classes, (total,), generator=gen)
    rows, lo = [], 0
    for n in counts:
        rows.append(list(range(lo, lo + n)))
        lo += n
    index = ClientIndex.from_lists(rows, "cpu")
    return FederatedData(x, y, index, index, classes)


@pytest.fixture(scope="module")
def conv_case():
    data = image_data([24, 16, 11])  # 11: a short last batch (sub-steps of their own with BatchNorm)
    torch.manual_seed(0)
    model = SmallConvNet()
    gen = torch.Generator().manual_seed(3)
    start = {k: v + 0.05 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
             for k, v in broadcast(model_weights(model), data.num_clients).items()}
    hp = LocalSGD(epochs=3, batch_size=8, lr=0.05, momentum=0.5)
    return model, data, start, hp


def test_bf16_training_of_a_batchnorm_cnn_stays_near_fp32(conv_case):
    """The looser end-to-end check: 3 epochs (9 steps) of momentum SGD.  Each layer's products round
    3 times (inputs, weights, result) at u = 2^-8, so a step's gradient is off by some L x 3u relative
    to itself for L = 3 layers (3.5 %) before BatchNorm's division by the batch's spread and the
    nonlinearities amplify it; over the run the weights' distance from the FP32 run is then a few
    per cent of the distance training moved them (5.9 % measured on a 2-core EPYC, AVX2).  The bound
    is loose, 20 %, and the distance must also be far above FP32 rounding (autocast ran); the
    per-client training losses agree to 2 % and BatchNorm's running statistics stay FP32 buffers."""
    model, data, start, hp = conv_case
    (w32, loss32), (w16, loss16) = (one_round(model, data, Numerics(precision=p), hp, start) for p in ("fp32", "bf16"))
    for name in w32:
        assert w16[name].dtype == w32[name].dtype == start[name].dtype, name
    params = [n for n, _ in model.named_parameters()]
    moved = torch.cat([(w32[n] - start[n]).flatten() for n in params]).norm()
    apart = torch.cat([(w16[n] - w32[n]).flatten() for n in params]).norm()
    assert 1e-4 * moved < apart < 0.2 * moved
    assert torch.allclose(loss16, loss32, rtol=0.02)
    assert torch.allclose(w16["bn1.running_mean"], w32["bn1.running_mean"], rtol=0.05, atol=0.02)


def test_bf16_through_vmap_and_the_oracle_with_batchnorm(conv_case):
    """The vmap step and the minibatch-gradient oracle (pFedMe's, FeMAM's additive levels) under bf16 on
    a BatchNorm model: BatchNorm takes FP32 input there (vmap's rule refuses bfloat16 beside FP32
    statistics); the numbers stay as near FP32 as the wide step's."""
    model, data, start, hp = conv_case
    (w32, _), (w16, _) = (one_round(model, data, Numerics(precision=p), hp, start, partial(VectorisedTrainer, wide=False))
                          for p in ("fp32", "bf16"))
    params = [n for n, _ in model.named_parameters()]
    moved = torch.cat([(w32[n] - start[n]).flatten() for n in params]).norm()
    apart = torch.cat([(w16[n] - w32[n]).flatten() for n in params]).norm()
    assert 1e-4 * moved < apart < 0.2 * moved
    one = {k: v[:2] for k, v in start.items()}
    names = [n for n, _ in model.named_parameters()]
    grads = {}
    for precision in ("fp32", "bf16"):
        oracle = MinibatchGradients(model, data, data.train, 8, numerics=Numerics(precision=precision))
        clients = torch.arange(2)
        batches = oracle.draw(1, clients, torch.Generator().manual_seed(0))
        buffers = {k: v.clone() for k, v in one.items() if k not in names}
        grads[precision], _ = oracle({n: one[n] for n in names}, batches[0], clients, buffers)
    for n in names:
        assert grads["bf16"][n].dtype == torch.float32
        scale = float(grads["fp32"][n].norm())
        assert 0 < float((grads["bf16"][n] - grads["fp32"][n]).norm()) < 0.1 * scale, n


@pytest.mark.parametrize("trainer", [VectorisedTrainer, ReferenceTrainer])
def test_channels_last_gives_fp32_numbers(conv_case, trainer):
    """NHWC activations and weights: other kernels, the same numbers up to FP32 rounding."""
    model, data, start, hp = conv_case
    (w0, loss0), (w1, loss1) = (one_round(model, data, Numerics(channels_last=cl), hp, start, trainer) for cl in (False, True))
    for name in w0:
        scale = float(w0[name].abs().max()) if w0[name].is_floating_point() else 1.0
        assert torch.allclose(w1[name], w0[name], rtol=1e-5, atol=1e-5 * max(scale, 1.0)), name
    assert torch.allclose(loss1, loss0, rtol=1e-5)
    if trainer is VectorisedTrainer:
        assert VectorisedTrainer(model, data, numerics=Numerics(channels_last=True)).step_kind == "wide"


def test_defaults_are_the_fp32_eager_path(conv_case):
    """No numerics, the default Numerics and the explicit defaults: bit-for-bit the same run."""
    model, data, start, hp = conv_case
    hp = LocalSGD(epochs=1, batch_size=8, lr=0.05)
    runs = [one_round(model, data, numerics, hp, start) for numerics in (None, Numerics(),
            Numerics.from_training({"precision": "fp32", "channels_last": False, "cudnn_benchmark": False, "compile": False}))]
    for weights, loss in runs[1:]:
        assert all(torch.equal(weights[k], runs[0][0][k]) for k in weights) and torch.equal(loss, runs[0][1])


def test_compile_wraps_the_step_and_is_recorded(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn: fn)  # what is wrapped, not what dynamo makes of it (slow to import)
    data = linear_data(2, 4, 6, 3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 3))
    trainer = VectorisedTrainer(model, data, numerics=Numerics(compile=True))
    assert isinstance(trainer._step, EagerFallback)  # the hand-written step too: compile is not ignored
    assert trainer.numerics_used == {"precision": "fp32", "channels_last": False, "cudnn_benchmark": False,
                                     "compile": True, "compiled": True, "trainer_step": "fused_mlp"}
    with pytest.raises(ValueError, match="reference engine runs eagerly"):
        ReferenceTrainer(model, data, numerics=Numerics(compile=True))


def test_channels_last_refuses_a_conv_model_the_wide_step_cannot_fold():
    data = image_data([4, 4])
    with pytest.raises(ValueError, match="channels_last: SmallConvNet does not fold"):
        VectorisedTrainer(SmallConvNet(), data, wide=False, numerics=Numerics(channels_last=True))


def test_backends_are_the_runs_and_restored():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark)
    with Numerics(precision="tf32", cudnn_benchmark=True).backends():
        assert (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark) == (True, True, True)
    with pytest.raises(RuntimeError), Numerics().backends():
        assert (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark) == (False, True, False)  # PyTorch's defaults: FP32 products, TF32 convolutions
        raise RuntimeError
    assert (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark) == before


# ---- through the pipeline and the config ------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_partition(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition")
    config = tiny_digits_config(rounds=3)
    build_partition(config, "digits", "dir", 0, root / "p.npz", root / "p.json")
    return root / "p.npz"


def _numbers(metrics: dict) -> dict:
    return {k: metrics[k] for k in ("final", "global", "hyperparameters")}


def test_default_settings_keep_the_numbers_and_identity(tmp_path, digits_partition):
    """A run that sets the four keys to their defaults equals one that does not, bit for bit, with the
    same recorded hyperparameters (none of the new keys among them) and the same fingerprint."""
    cell = Cell("tiny", "digits", "dir", "mlp", "fedavg", 0)
    plain = tiny_digits_config(rounds=3, lr=0.1)
    explicit = tiny_digits_config(rounds=3, lr=0.1, precision="fp32", channels_last=False, cudnn_benchmark=False, compile=False)
    validate_config(explicit)
    a, b = (run_cell(cell_job(config, cell), digits_partition, tmp_path / name) for name, config in (("a", plain), ("b", explicit)))
    assert _numbers(a) == _numbers(b)
    assert (tmp_path / "a" / "history.csv").read_text() == (tmp_path / "b" / "history.csv").read_text()
    assert not {"precision", "channels_last", "cudnn_benchmark", "compile"} & set(a["hyperparameters"]["training"])
    assert results_settings(resolve_cell(plain, cell)) == results_settings(resolve_cell(explicit, cell))
    assert a["numerics"] == {"precision": "fp32", "channels_last": False, "cudnn_benchmark": False, "compile": False,
                             "compiled": False, "trainer_step": "fused_mlp"}


def test_a_bf16_run_records_it_and_stays_near_fp32(tmp_path, digits_partition):
    cell = Cell("tiny", "digits", "dir", "mlp", "fedavg", 0)
    fp32 = run_cell(cell_job(tiny_digits_config(rounds=3, lr=0.1), cell), digits_partition, tmp_path / "fp32")
    config = tiny_digits_config(rounds=3, lr=0.1, precision="bf16", channels_last=True)
    validate_config(config)
    bf16 = run_cell(cell_job(config, cell), digits_partition, tmp_path / "bf16")
    written = json.loads((tmp_path / "bf16" / "metrics.json").read_text())
    assert written["numerics"]["precision"] == "bf16" and written["numerics"]["trainer_step"] == "wide"
    assert written["numerics"]["channels_last"] is True
    assert written["hyperparameters"]["training"]["precision"] == "bf16"  # part of the cell's identity
    assert "channels_last" not in written["hyperparameters"]["training"]  # how it ran, not what it computed
    assert bf16["final"]["accuracy"] == pytest.approx(fp32["final"]["accuracy"], abs=0.05)


@pytest.mark.parametrize("training, expected", [
    ({"precision": "fp16"}, r"experiments.tiny.training.precision: 'fp16' is not a precision; valid choices: fp32, tf32, bf16"),
    ({"compile": "yes"}, r"experiments.tiny.training.compile: must be true or false"),
    ({"compile": True, "engine": "reference"}, r"training.compile: the 'reference' engine runs eagerly"),
])
def test_bad_values_are_refused(training, expected):
    with pytest.raises(ConfigError, match=expected):
        check_entries(tiny_digits_config(**training))


def test_the_schema_refuses_an_unknown_precision():
    with pytest.raises(ValueError, match="fp16"):
        validate_config(tiny_digits_config(precision="fp16"))


@pytest.mark.parametrize("method, params", [("pfedme", {}), ("perfedavg", {}), ("fedasam", {}), ("fedavg", {"local_steps": 5}),
                                            ("femam", {"init_rounds": 1})])
def test_channels_last_is_refused_for_steps_through_vmap(method, params):
    config = tiny_digits_config(channels_last=True)
    config["algorithms"]["fedavg"] = {"method": method, **params}
    with pytest.raises(ConfigError, match=r"training.channels_last: algorithm 'fedavg' .* takes no memory format"):
        check_entries(config)
    config["experiments"]["tiny"]["training"]["channels_last"] = False  # the value they run with anyway
    check_entries(config)


def test_a_settings_name_round_trips_and_a_misspelt_flag_is_refused():
    """``bf16+cl+compile``: the name benchmarks/numerics_matrix.py, config/throughputs.yaml's ``settings`` and
    ``cost_report --numerics`` share; flags in one order whatever order they are written in."""
    numerics = Numerics.parse("bf16+compile+cl")
    assert numerics == Numerics("bf16", channels_last=True, compile=True) and numerics.label == "bf16+cl+compile"
    assert Numerics().label == "fp32" and Numerics.parse("tf32+bench").cudnn_benchmark
    with pytest.raises(ValueError, match="unknown flags"):
        Numerics.parse("bf16+channels_last")
    with pytest.raises(ValueError, match="not a precision"):
        Numerics.parse("fp8")

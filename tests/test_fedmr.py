"""FedMR (layer-wise recombination, two-stage training), FedIndep, FedMut, FedExP, CluSamp and
FedGen building blocks against hand-derived facts (whole rounds: ``test_fedmr_rounds.py``)."""

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from conftest import Streams, make_data, make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.fedexp import fedexp_step_size
from fedbench.algorithms.fedmut import acceleration_rate, mutate
from fedbench.algorithms.recombination import recombination_units, recombine, segment_of_units
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import broadcast, model_weights, weighted_average


def bn_model(dim=5, classes=3) -> nn.Module:
    """Linear-BN-ReLU-Linear-BN-ReLU-Linear: three recombination units."""
    return nn.Sequential(
        nn.Linear(dim, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, classes)
    )


def tagged(model: nn.Module, m: int) -> dict:
    """m stacked models whose every floating entry of model i is filled with the value i."""
    single = model_weights(model)
    return {k: (torch.arange(m, dtype=v.dtype).view(-1, *[1] * v.dim()) * torch.ones_like(v)) if v.is_floating_point()
            else torch.arange(m).view(-1, *[1] * v.dim()) * torch.ones_like(v) for k, v in single.items()}


def run(algorithm, fed, rounds):
    state = algorithm.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        fed.begin_round(t)  # as the pipeline does: round t's shared streams
        state, _ = algorithm.round(fed, state, t)
    return state


# ---- recombination --------------------------------------------------------------------


def test_units_are_layers_with_their_batchnorm():
    units = recombination_units(bn_model())
    assert units == [
        ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"],
        ["3.weight", "3.bias", "4.weight", "4.bias", "4.running_mean", "4.running_var", "4.num_batches_tracked"],
        ["6.weight", "6.bias"],
    ]
    entries = recombination_units(bn_model(), "entry")
    assert entries == [[k] for k in bn_model().state_dict()]


def test_recombination_is_a_permutation_per_layer():
    model, m = bn_model(), 5
    stacked = tagged(model, m)
    units = recombination_units(model)
    out = recombine(stacked, units, segment_of_units(len(units), 0.0), torch.Generator().manual_seed(3))
    sources = []
    for unit in units:
        # every entry of a unit comes from the same model (a layer moves with its BatchNorm) ...
        origin = [out[k].reshape(m, -1)[:, 0].long() for k in unit]
        for o in origin[1:]:
            assert torch.equal(o, origin[0])
        # ... and each slot receives that layer from exactly one model: a permutation
        assert sorted(origin[0].tolist()) == list(range(m))
        sources.append(origin[0])
        for k in unit:  # the multiset of layers is unchanged: slot i holds model pi(i)'s tensor
            torch.testing.assert_close(out[k], stacked[k][origin[0]])
    assert any(not torch.equal(sources[0], s) for s in sources[1:])  # independent draws per layer (seeded)


def test_whole_models_are_reassigned_with_x_one():
    model, m = bn_model(), 6
    stacked = tagged(model, m)
    units = recombination_units(model)
    assert segment_of_units(len(units), 1.0) == [1, 1, 1]
    out = recombine(stacked, units, segment_of_units(len(units), 1.0), torch.Generator().manual_seed(0))
    origin = out["0.weight"].reshape(m, -1)[:, 0].long()
    assert sorted(origin.tolist()) == list(range(m))
    for k in stacked:
        torch.testing.assert_close(out[k], stacked[k][origin])


def test_segments_follow_the_paper():
    """Layer j of N in segment ceil(j / (x N)): N = 10, x = 0.3 -> 3 layers per segment, 4 segments."""
    assert segment_of_units(10, 0.3) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    assert segment_of_units(4, 0.5) == [1, 1, 2, 2]
    assert segment_of_units(3, 0.0) == [0, 1, 2]


# ---- FedMR ----------------------------------------------------------------------------


def test_fedmr_without_recombination_is_fedavg_with_uniform_weights():
    """All rounds in stage 1: every round restarts from the uniform mean of the trained models."""
    data = make_data([12, 30, 9, 17, 22])  # no one-sample batch: BatchNorm1d refuses those in training
    hp = LocalSGD(epochs=2, batch_size=5, lr=0.1, momentum=0.5)
    torch.manual_seed(0)
    model = bn_model()
    fed = make_federation(data, model, hp, participation=0.6, seed=4)
    state = run(ALGORITHMS["fedmr"](first_stage_rounds=3), fed, rounds=3)

    replay = make_federation(data, model, hp, participation=0.6, seed=4)
    w = model_weights(model)
    for t in range(1, 4):
        replay.begin_round(t)
        chosen = replay.sample_clients()
        trained, _ = replay.train_clients(broadcast(w, len(chosen)), chosen)
        w = weighted_average(trained, torch.ones(len(chosen)))
    for k in w:
        torch.testing.assert_close(state["global"][k], w[k])

    # with equal client sizes, the sample-weighted FedAvg baseline is the same run
    equal = make_data([10, 10, 10, 10])
    torch.manual_seed(0)
    b_model = bn_model()
    torch.manual_seed(0)
    a = run(ALGORITHMS["fedmr"](first_stage_rounds=2), make_federation(equal, bn_model(), hp, 0.5, seed=1), 2)
    b = run(ALGORITHMS["fedavg"](), make_federation(equal, b_model, hp, 0.5, seed=1), 2)
    for k in b["global"]:
        torch.testing.assert_close(a["global"][k], b["global"][k])


def test_fedmr_with_one_model_is_sequential_sgd():
    """m = 1: recombination is the identity, the global model is the one model, which each round
    continues training on the next sampled client (plain sequential SGD, momentum reset per round)."""
    data = make_data([14, 6, 11])
    hp = LocalSGD(epochs=1, batch_size=4, lr=0.2)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    fed = make_federation(data, model, hp, participation=1 / 3, seed=2)
    state = run(ALGORITHMS["fedmr"](), fed, rounds=4)

    streams = Streams(2)
    w = model[1].weight.detach().double().clone()
    b = model[1].bias.detach().double().clone()
    x, y = data.x.double(), data.y
    for t in range(1, 5):
        streams.begin(t)
        client = int(streams.sample(3, 1)[0])
        plan = make_batch_plan(data.train.counts[[client]], 1, 4, streams.clients("batches", [client]))
        for batch in plan.client_batches(0):
            rows = data.train.index[client][batch]
            p = torch.softmax(x[rows] @ w.T + b, 1)
            r = p - torch.eye(3, dtype=torch.float64)[y[rows]]
            w, b = w - 0.2 * r.T @ x[rows] / len(rows), b - 0.2 * r.mean(0)
    torch.testing.assert_close(state["global"]["1.weight"].double(), w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state["global"]["1.bias"].double(), b, atol=1e-5, rtol=1e-5)


def test_fedmr_refuses_more_models_than_clients():
    fed = make_federation(make_data([5, 5]), bn_model(), LocalSGD(epochs=1, batch_size=5, lr=0.1))
    with pytest.raises(ValueError, match="intermediate models m = 3 exceeds the number of clients"):
        ALGORITHMS["fedmr"](models=3).init(fed, model_weights(fed.model))
    with pytest.raises(ValueError, match="first_stage_rounds"):
        ALGORITHMS["fedmr"](first_stage_rounds=-1)
    with pytest.raises(ValueError, match="partition"):
        ALGORITHMS["fedmr"](partition=1.5)


# ---- FedMut ---------------------------------------------------------------------------


@pytest.mark.parametrize("m", [4, 10])
def test_fedmut_models_average_to_the_accelerated_global(m):
    """Mean of the mutated models = w_glob + alpha Delta rate / 2; at the bound rate = 0 -> w_glob."""
    w = {"a": torch.tensor([1.0, -2.0, 0.5]), "n": torch.tensor(7)}
    delta = {"a": torch.tensor([0.2, 0.4, -1.0])}
    radius = 5.0
    for r, expected_rate in ((0, 0.3), (50, 0.15), (100, 0.0), (150, 0.0)):
        rate = acceleration_rate(r, 0.3, 100)
        assert rate == pytest.approx(expected_rate)
        out = mutate(w, delta, m, radius, rate, torch.Generator().manual_seed(r))
        torch.testing.assert_close(out["a"].mean(0), w["a"] + radius * delta["a"] * rate / 2)
        assert out["n"].tolist() == [7] * m
        # each model is w_glob + alpha Delta c with c in {1, -1 + rate}
        c = (out["a"] - w["a"]) / (radius * delta["a"])
        torch.testing.assert_close(c, c[:, :1].expand_as(c))  # ... one coefficient per model and entry
        values = c[:, 0].double()
        assert torch.all(torch.isclose(values, torch.tensor(1.0, dtype=torch.float64), atol=1e-5)
                         | torch.isclose(values, torch.tensor(-1 + rate, dtype=torch.float64), atol=1e-5))
        assert int(torch.isclose(values, torch.tensor(1.0, dtype=torch.float64), atol=1e-5).sum()) == m // 2


def test_fedmut_odd_m_keeps_one_model_at_the_global():
    out = mutate({"a": torch.ones(2)}, {"a": torch.ones(2)}, 3, 4.0, 0.0, torch.Generator().manual_seed(0))
    torch.testing.assert_close(out["a"][2], torch.ones(2))
    torch.testing.assert_close(out["a"][:2].sum(0), 2 * torch.ones(2))


def test_fedmut_presets():
    assert ALGORITHMS["fedmut"]().radius == 5.0 and ALGORITHMS["fedmut"]().bound == 100
    code = ALGORITHMS["fedmut"](preset="fedmut")
    assert (code.radius, code.acc_rate, code.bound) == (4.0, 0.3, 50)
    assert ALGORITHMS["fedmut"](preset="fedmut", radius=2.0).radius == 2.0


# ---- FedExP ---------------------------------------------------------------------------


def test_fedexp_step_size_by_hand():
    """Agreeing updates: A = ||D||^2 = ||D_bar||^2, eta = max(1, A / (2 (A + eps m))) = 1.
    Cancelling updates D, -D (equal weights): D_bar = 0, eta = ||D||^2 / (2 eps m)."""
    d = torch.tensor([3.0, 4.0])  # ||d||^2 = 25
    agree = {"w": torch.stack([d, d])}
    eta, mean = fedexp_step_size(agree, torch.tensor([1.0, 3.0]), ["w"], epsilon=0.1)
    assert eta == 1.0
    torch.testing.assert_close(mean["w"], d)
    cancel = {"w": torch.stack([d, -d])}
    eta, mean = fedexp_step_size(cancel, torch.tensor([2.0, 2.0]), ["w"], epsilon=0.1)
    assert eta == pytest.approx(25 / (2 * 0.1 * 2))
    torch.testing.assert_close(mean["w"], torch.zeros(2))
    # partly opposed, weights 1 and 3: D_bar = (d - 3 * 0.5 d) / 4 = -d / 8, A = (25 + 3 * 6.25) / 4
    part = {"w": torch.stack([d, -0.5 * d])}
    eta, _ = fedexp_step_size(part, torch.tensor([1.0, 3.0]), ["w"], epsilon=0.1)
    assert eta == pytest.approx(max(1.0, 0.5 * (25 + 3 * 6.25) / 4 / (25 / 64 + 0.2)))


# ---- CluSamp --------------------------------------------------------------------------


def test_clusamp_distributions_sum_to_one_and_carry_every_clients_weight():
    """Algorithm 2: m distributions, each of mass 1; client i's total over them is m p_i."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    from fedbench.algorithms.clusamp import dissimilarity, sampling_distributions

    rng = np.random.default_rng(0)
    gradients = torch.from_numpy(rng.normal(size=(9, 4)))
    counts = np.array([30.0, 5, 12, 80, 7, 19, 40, 3, 24])  # client 3 alone weighs 4 * 80/220 > 1
    d = dissimilarity(gradients, "L1")
    np.testing.assert_allclose(d[0, 1], (gradients[0] - gradients[1]).abs().sum().item())
    for m in (2, 4, 9):
        r = sampling_distributions(linkage(squareform(d), "ward"), counts, m)
        assert r.shape == (m, 9) and (r >= 0).all()
        np.testing.assert_allclose(r.sum(1), np.ones(m))
        np.testing.assert_allclose(r.sum(0), m * counts / counts.sum())


# ---- FedGen ---------------------------------------------------------------------------


def test_fedgen_generator_loss_falls_on_two_clients():
    """Two clients' fixed heads (client 0 knows classes 0, 1; client 1 classes 1, 2): training the
    generator against their label-weighted ensemble lowers the teacher + diversity loss."""
    from fedbench.algorithms.fedgen import generator_loss

    data = make_data([20, 20], num_classes=3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=5, lr=0.1), seed=3)
    algorithm = ALGORITHMS["fedgen"](generator_epochs=4, teacher_iterations=5, generator_batch=32, noise_dim=8, hidden=16,
                                     generator_lr=1e-2)
    state = algorithm.init(fed, model_weights(model))
    torch.manual_seed(0)
    heads = (torch.randn(2, 3, 4), torch.randn(2, 3))
    counts = torch.tensor([[10.0, 10.0, 0.0], [0.0, 5.0, 15.0]])
    share = counts / counts.sum(0, keepdim=True)
    torch.testing.assert_close(share, torch.tensor([[1.0, 2 / 3, 0.0], [0.0, 1 / 3, 1.0]]))
    y = torch.arange(3).repeat(20)
    noise = torch.rand(60, 8, generator=torch.Generator().manual_seed(1))
    generator = state["generator"].train()
    before = float(generator_loss(generator, heads, share, y, noise, 1.0).detach())
    losses = algorithm.train_generator(fed, state, heads, counts)
    after = float(generator_loss(generator, heads, share, y, noise, 1.0).detach())
    assert len(losses) == 20
    assert after < before and np.mean(losses[-5:]) < np.mean(losses[:5])


def test_fedgen_local_gradient_matches_per_client_autograd():
    """The vmapped regularised loss's gradient = each client's autograd gradient of
    CE(f(x), y) + alpha CE(head(z_hat), y_hat) + beta KLDiv(log_softmax f(x), softmax head(z_real)) ("batchmean"),
    and its value is that loss (the KL with its target-entropy term, so >= 0), its auxiliary output
    the plain CE.  Every softmax names its class axis: no implicit-dimension (deprecated) warning."""
    from torch.func import grad_and_value, vmap

    from fedbench.algorithms.fedgen import regularised_loss

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    k, batch = 3, 6
    params = {n: p.detach().unsqueeze(0) + 0.1 * torch.randn(k, *p.shape) for n, p in model.named_parameters()}
    x, y = torch.randn(k, batch, 5), torch.randint(3, (k, batch))
    z_real, z_hat, y_hat = torch.randn(k, batch, 4), torch.randn(k, batch, 4), torch.randint(3, (k, batch))
    mask = torch.ones(k, batch)
    vm = vmap(grad_and_value(regularised_loss(model, "3.weight", "3.bias", 0.7, 0.3), has_aux=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grads, (value, ce) = vm(params, {}, x, y, mask, z_real, z_hat, y_hat)
    for c in range(k):
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(params[n][c])
        model.zero_grad()
        logits = model(x[c])
        head = model[3]
        target = torch.softmax(head(z_real[c]), -1).detach()
        loss = (nn.functional.cross_entropy(logits, y[c]) + 0.7 * nn.functional.cross_entropy(head(z_hat[c]), y_hat[c])
                + 0.3 * nn.functional.kl_div(torch.log_softmax(logits, -1), target, reduction="batchmean"))
        loss.backward()
        torch.testing.assert_close(value[c], loss.detach())
        for n, p in model.named_parameters():
            torch.testing.assert_close(grads[n][c], p.grad, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(ce[c], nn.functional.cross_entropy(logits, y[c]).detach())

"""FedMR, FedIndep, FedMut, FedExP, CluSamp, FedGen and FedASAM, one full ``round()`` at a time,
against an independent recomputation: every client trained by hand (a copy of the model,
``torch.optim.SGD``, plain autograd, one client at a time) on the batches drawn from a replay of
the federation's random stream, and the server step written out from the papers."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import Streams, make_data, make_federation
from test_fedmr import bn_model
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights

LAYERS = [["1.weight", "1.bias"], ["3.weight", "3.bias"]]  # the two Linear layers of mlp()


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))


def row(stacked: dict, j: int) -> dict:
    return {k: v[j] for k, v in stacked.items()}


def mean_of(models: list[dict], weights=None) -> dict:
    w = torch.ones(len(models)) if weights is None else torch.as_tensor(weights, dtype=torch.float32)
    return {k: sum(wi * m[k] for wi, m in zip(w, models)) / w.sum() for k in models[0]}


def assert_weights_close(got: dict, want: dict, atol: float = 1e-5):
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=atol, rtol=1e-4, msg=lambda m: f"{k}: {m}")


def client_rows(data, client: int, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = data.train.index[client][positions]
    return data.x[rows], data.y[rows]


def train_by_hand(model: nn.Module, data, start: dict, client: int, batches: list, hp: LocalSGD) -> dict:
    """Client ``client`` trains a copy of ``model`` from ``start`` on ``batches`` (local sample
    positions) with ``torch.optim.SGD`` on the mean cross-entropy."""
    net = copy.deepcopy(model)
    net.load_state_dict(start)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
    for positions in batches:
        x, y = client_rows(data, client, positions)
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return model_weights(net)


def sample_and_train(data, model, hp, streams: Streams, starts: list[dict], m: int) -> tuple[torch.Tensor, list[dict]]:
    """One round's local work replayed from the round's shared ``streams``: m distinct clients drawn
    uniformly (increasing order), their batch plan, model i trained by the i-th drawn client."""
    chosen = streams.sample(data.num_clients, m)
    plan = make_batch_plan(data.train.counts[chosen], hp.epochs, hp.batch_size, streams.clients("batches", chosen))
    return chosen, [train_by_hand(model, data, starts[i], int(chosen[i]), plan.client_batches(i), hp) for i in range(m)]


# ---- FedMR and FedIndep -----------------------------------------------------------------


def replay_fedmr(data, model, hp, seed, rounds, m, first_stage, per_layer):
    """FedMR Alg. 1 by hand: per round (uniform mean, the m next models, the layer permutations).
    Slot j of layer l receives trained model pi_l(j)'s layer; ``per_layer=False`` draws one
    permutation for the whole model (Indep), from the method's own stream (``fed.generator``)."""
    g, streams = torch.Generator().manual_seed(seed), Streams(seed)
    models = [model_weights(model)] * m
    out = []
    for t in range(1, rounds + 1):
        streams.begin(t)
        _, trained = sample_and_train(data, model, hp, streams, models, m)
        mean = mean_of(trained)
        if t <= first_stage:  # stage 1: every model restarts from the aggregate
            perms = []
            models = [mean] * m
        else:
            perms = [torch.randperm(m, generator=g) for _ in LAYERS] if per_layer else [torch.randperm(m, generator=g)] * len(LAYERS)
            models = [{k: trained[int(perm[j])][k] for perm, layer in zip(perms, LAYERS) for k in layer} for j in range(m)]
        out.append((mean, models, perms))
    return out


def run_against_replay(algorithm, fed, expected, m):
    state = algorithm.init(fed, model_weights(fed.model))
    for t, (mean, models, _) in enumerate(expected, 1):
        fed.begin_round(t)
        state, _ = algorithm.round(fed, state, t)
        assert_weights_close(state["global"], mean)
        for j in range(m):
            assert_weights_close(row(state["models"], j), models[j])
    return state


FEDMR_DATA = [9, 14, 7, 12, 10]
FEDMR_HP = LocalSGD(epochs=1, batch_size=4, lr=0.3, momentum=0.5)


@pytest.mark.parametrize("first_stage", [0, 2])
def test_fedmr_round_recombines_the_trained_models_layer_by_layer(first_stage):
    """FedMR (Hu et al., KDD'24) Alg. 1 lines 3-9 and Sec. 4.2.2: intermediate model i is trained
    by the i-th sampled client, then every layer of the m trained models is dealt to the m slots by
    its own random permutation; line 11: the global model is their uniform mean.  Sec. 4.3
    (two-stage training; notes §2.4 ``r >= first_stage_bound``): rounds 1..first_stage aggregate
    (every slot restarts from the mean), recombination starts at round first_stage + 1."""
    data, m = make_data(FEDMR_DATA), 3
    model = mlp()
    fed = make_federation(data, model, FEDMR_HP, participation=0.6, seed=1)
    expected = replay_fedmr(data, model, FEDMR_HP, seed=1, rounds=first_stage + 2, m=m, first_stage=first_stage, per_layer=True)
    run_against_replay(ALGORITHMS["fedmr"](first_stage_rounds=first_stage), fed, expected, m)

    # the case discriminates: stage 1 draws no permutation, then the layers' permutations are not
    # the identity and differ between layers (recombination, not a reassignment of whole models)
    perms = [p for _, _, p in expected]
    assert all(p == [] for p in perms[:first_stage])
    recombined = perms[first_stage:]
    assert all(len(p) == len(LAYERS) for p in recombined)
    assert any(not torch.equal(p[0], p[1]) for p in recombined)
    assert any(not torch.equal(q, torch.arange(m)) for p in recombined for q in p)


def test_fedindep_passes_whole_models_on_and_never_aggregates():
    """Indep (FedMR Sec. 3, Fig. 1(b); notes §2.6 ``Training_FedIndenp.py``): the m models are
    trained independently, each passed whole to a new random client every round, never aggregated
    back; the scored global model is their uniform mean ("IndepAggr", Sec. 5.2)."""
    data, m = make_data(FEDMR_DATA), 3
    model = mlp()
    fed = make_federation(data, model, FEDMR_HP, participation=0.6, seed=1)
    expected = replay_fedmr(data, model, FEDMR_HP, seed=1, rounds=3, m=m, first_stage=0, per_layer=False)
    state = run_against_replay(ALGORITHMS["fedindep"](), fed, expected, m)
    assert any(not torch.equal(p[0], torch.arange(m)) for _, _, p in expected)  # models do move between slots
    for j in range(m):  # no model is pulled back to the aggregate
        assert (row(state["models"], j)["1.weight"] - state["global"]["1.weight"]).abs().max() > 1e-2


# ---- FedMut -----------------------------------------------------------------------------


def test_fedmut_round_mutates_around_the_uniform_mean_with_the_acceleration_rate():
    """FedMut (Hu et al., AAAI'24; notes §2.5 ``Training_FedMut.py``): the m models trained from
    the previous mutated models average to w_glob; Delta = w_glob - w_old; entry k of model j is
    w_glob[k] + alpha Delta[k] c_kj, where the m coefficients c_k. of each entry are m/2 values 1
    and m/2 values -1 + rate, rate = acc_rate (1 - min(r / bound, 1)) (r 0-based); so the models'
    mean is w_glob + alpha Delta rate / 2, and w_glob once r >= bound."""
    data, m = make_data([8, 11, 6, 9]), 4
    hp = LocalSGD(epochs=1, batch_size=4, lr=0.2)
    model = mlp()
    fed = make_federation(data, model, hp, participation=1.0, seed=2)
    radius, acc_rate, bound = 2.0, 0.3, 2
    algorithm = ALGORITHMS["fedmut"](radius=radius, acc_rate=acc_rate, bound=bound)
    state = algorithm.init(fed, model_weights(model))
    streams = Streams(2)
    for t, rate in zip((1, 2, 3), (0.3, 0.15, 0.0)):
        starts = [row(state["models"], j) for j in range(m)]
        old = state["global"]
        fed.begin_round(t)
        state, _ = algorithm.round(fed, state, t)
        streams.begin(t)
        _, trained = sample_and_train(data, model, hp, streams, starts, m)
        w_glob = mean_of(trained)
        assert_weights_close(state["global"], w_glob)
        delta = {k: w_glob[k] - old[k] for k in w_glob}
        assert min(d.abs().max() for d in delta.values()) > 1e-3  # every entry moved: the mutation is visible
        mean = {k: v.mean(0) for k, v in state["models"].items()}
        assert_weights_close(mean, {k: w_glob[k] + radius * delta[k] * rate / 2 for k in w_glob})
        for k in w_glob:
            step = radius * delta[k]
            plus = [bool(torch.allclose(state["models"][k][j], w_glob[k] + step, atol=1e-5)) for j in range(m)]
            minus = [bool(torch.allclose(state["models"][k][j], w_glob[k] + (rate - 1) * step, atol=1e-5)) for j in range(m)]
            assert all(p or q for p, q in zip(plus, minus)), k
            assert sum(plus) == m // 2 and sum(minus) == m // 2, k


def test_fedmut_round_mutates_every_entry_of_m_models_from_the_federation_stream():
    """FedMut (module docstring; notes §2.5): m = max(1, round(rho K)) intermediate models, here 2 of 4
    clients (fewer than any layer's width); every floating entry k of the next models is
    w_glob[k] + alpha Delta[k] c_kj with one coefficient 1 and one -1 + rate per entry (m = 2: one
    pair), rate = acc_rate at round 1; BatchNorm's integer batch counters, which sit between the
    layers' weights, are copied from w_glob.  The coefficients come from the federation's stream
    (``Federation``: the run's randomness): the same seed gives the same models whatever torch's
    global stream.  (w_glob, the uniform mean of the trained models, is checked by hand above.)"""
    data = make_data([8, 11, 6, 10])
    hp = LocalSGD(epochs=1, batch_size=4, lr=0.2)
    radius, acc_rate = 2.0, 0.5
    torch.manual_seed(0)
    initial = bn_model()
    runs = []
    for global_seed in (0, 1):
        model = copy.deepcopy(initial)
        fed = make_federation(data, model, hp, participation=0.5, seed=2)
        algorithm = ALGORITHMS["fedmut"](radius=radius, acc_rate=acc_rate, bound=4)
        state = algorithm.init(fed, model_weights(model))
        old = state["global"]
        torch.manual_seed(global_seed)
        state, _ = algorithm.round(fed, state, 1)
        runs.append(state)
    w_glob, models = state["global"], state["models"]
    assert list(models) == list(w_glob) == list(old)
    for k, v in w_glob.items():
        assert models[k].shape == (2, *v.shape) and models[k].dtype == v.dtype, k
        if not v.is_floating_point():
            assert torch.equal(models[k], v.expand(2, *v.shape)) and int(v) > 0, k
            continue
        delta = v - old[k]
        if k in ("0.bias", "3.bias"):  # a Linear bias before BatchNorm gets no gradient: Delta = 0 up to rounding
            assert delta.abs().max() < 1e-6 and torch.allclose(models[k], v.expand(2, *v.shape), atol=1e-6), k
            continue
        assert delta.abs().max() > 1e-4, k  # every other entry moved: the mutation is visible
        up, down = v + radius * delta, v + radius * (acc_rate - 1) * delta
        first_up = torch.allclose(models[k][0], up, atol=1e-6)
        assert first_up != torch.allclose(models[k][0], down, atol=1e-6), k
        assert torch.allclose(models[k][1], down if first_up else up, atol=1e-6), k
    for k in w_glob:
        assert torch.equal(runs[0]["models"][k], runs[1]["models"][k]), k


# ---- FedExP -----------------------------------------------------------------------------


def flat(weights: dict, names: list[str]) -> np.ndarray:
    return np.concatenate([weights[n].double().numpy().ravel() for n in names])


def conflicting_clients(sizes: list[int]):
    """Client c > 0 holds the features of client 0's first rows and labels them y + c (mod 3):
    the clients' updates pull in different directions."""
    data = make_data(sizes)
    base = data.train.index[0]
    for c in range(1, len(sizes)):
        rows = data.train.index[c][: sizes[c]]
        data.x[rows] = data.x[base[: sizes[c]]]
        data.y[rows] = (data.y[base[: sizes[c]]] + c) % 3
    return data


@pytest.mark.parametrize("sizes, participation", [([12, 8, 10], 1.0), ([12, 8, 10, 11], 0.5)])
def test_fedexp_round_extrapolates_the_weighted_mean_update(sizes, participation):
    """FedExP (Jhunjhunwala et al., ICLR'23, Eq. (8); notes §2.6 ``Training_FedExP.py``):
    Delta_i = w_i - w, p_i = n_i / n, Delta_bar = sum p_i Delta_i / sum p_i,
    eta_g = max(1, sum p_i ||Delta_i||^2 / (2 sum p_i (||Delta_bar||^2 + eps m))), w <- w + eta_g Delta_bar;
    the scored model is (w_t + w_{t+1}) / 2.  Conflicting clients make eta_g > 1 strictly.  All
    three clients, then m = 2 of four (the sums run over the sampled clients only)."""
    data = conflicting_clients(sizes)
    hp = LocalSGD(epochs=3, batch_size=4, lr=1.0)
    model = mlp()
    fed = make_federation(data, model, hp, participation=participation, seed=4)
    epsilon, m = 0.1, max(1, round(participation * len(sizes)))
    algorithm = ALGORITHMS["fedexp"]()  # the code's epsilon = 0.1
    state = algorithm.init(fed, model_weights(model))
    streams = Streams(4)
    names = [n for n, _ in model.named_parameters()]
    counts = data.train.counts.double().numpy()
    for t in (1, 2):
        w = state["global"]
        streams.begin(t)
        chosen, trained = sample_and_train(data, model, hp, streams, [w] * m, m)
        p = counts[chosen.numpy()] / counts.sum()
        deltas = np.stack([flat(v, names) - flat(w, names) for v in trained])
        d_bar = (p[:, None] * deltas).sum(0) / p.sum()
        spread = (p * (deltas**2).sum(1)).sum() / p.sum()
        eta = max(1.0, 0.5 * spread / ((d_bar**2).sum() + epsilon * m))
        assert eta > 1.03  # extrapolation, not averaging
        fed.begin_round(t)
        state, _ = algorithm.round(fed, state, t)
        assert state["eta"] == pytest.approx(eta, rel=1e-4)
        new = flat(w, names) + eta * d_bar
        np.testing.assert_allclose(flat(state["global"], names), new, atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(flat(algorithm.global_model(fed, state), names), (flat(w, names) + new) / 2,
                                   atol=1e-5, rtol=1e-4)


# ---- CluSamp ----------------------------------------------------------------------------


def test_clusamp_round_draws_one_client_from_each_cluster_distribution():
    """CluSamp (Fraboni et al., ICML'21, Algorithm 2; notes §2.6): representative gradients
    G_i = c_i 1 with c = (0, 0.1, 5, 5.1) put clients {0, 1} and {2, 3} in one Ward cluster each;
    with m = 2 and sizes (12, 8, 10, 10) the weights m p_i = (.6, .4, .5, .5) fill the two
    distributions r_0 = (.6, .4, 0, 0), r_1 = (0, 0, .5, .5) exactly, so slot 0 draws client 0 or 1
    and slot 1 client 2 or 3 (by the round's uniforms u: client 0 iff u_0 <= .6, client 2 iff
    u_1 <= .5); the drawn clients' G become their local update, the global model their
    sample-weighted average."""
    sizes = [12, 8, 10, 10]
    data = make_data(sizes)
    hp = LocalSGD(epochs=1, batch_size=4, lr=0.2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    fed = make_federation(data, model, hp, participation=0.5, seed=4)
    algorithm = ALGORITHMS["clusamp"]()
    state = algorithm.init(fed, model_weights(model))
    names = [n for n, _ in model.named_parameters()]
    representative = torch.tensor([0.0, 0.1, 5.0, 5.1])[:, None] * torch.ones(4, 18)
    g, streams = torch.Generator().manual_seed(4), Streams(4)  # CluSamp's own draw; the round's batches
    drawn = []
    for t in range(1, 7):
        state = {**state, "gradients": representative.clone()}
        w = state["global"]
        u = torch.rand(2, 1, generator=g, dtype=torch.float64).flatten()
        chosen = [0 if u[0] <= 0.6 else 1, 2 if u[1] <= 0.5 else 3]
        streams.begin(t)
        plan = make_batch_plan(data.train.counts[chosen], hp.epochs, hp.batch_size, streams.clients("batches", chosen))
        trained = [train_by_hand(model, data, w, c, plan.client_batches(i), hp) for i, c in enumerate(chosen)]
        fed.begin_round(t)
        state, _ = algorithm.round(fed, state, t)
        assert_weights_close(state["global"], mean_of(trained, [sizes[c] for c in chosen]))
        for i, c in enumerate(chosen):
            update = torch.cat([(trained[i][n] - w[n]).flatten() for n in names])
            torch.testing.assert_close(state["gradients"][c], update, atol=1e-5, rtol=1e-4)
        others = [c for c in range(4) if c not in chosen]
        torch.testing.assert_close(state["gradients"][others], representative[others])
        drawn.append(tuple(chosen))
    assert {c for c, _ in drawn} == {0, 1} and {c for _, c in drawn} == {2, 3}  # both ends of each distribution


# ---- FedGen -----------------------------------------------------------------------------


def label_counts(data, clients) -> torch.Tensor:
    """n_{u,y}: client u's training samples of label y."""
    return torch.stack([torch.bincount(data.y[data.train.index[c][: int(data.train.counts[c])]], minlength=3)
                        for c in clients]).double()


def train_generator_by_hand(generator, heads, counts, g, steps, batch, noise_dim, lr):
    """FedGen's server step (Zhu et al. Eq. (4), the released ``train_generator``): Adam (weight
    decay 1e-2) on sum_u mean_b w_{u,y_b} CE(head_u(G(y_b, eps_b)), y_b) + exp(-mean_ij d_eps(i, j) d_G(i, j)),
    w_{u,y} = n_{u,y} / sum_u' n_{u',y}, y_b uniform over the labels the round's clients hold,
    d_eps the mean squared and d_G the mean absolute difference (``DiversityLoss('l1')``)."""
    share = counts / counts.sum(0).clamp_min(1e-12)
    present = torch.nonzero(counts.sum(0) > 0).flatten()
    opt = torch.optim.Adam(generator.parameters(), lr=lr, weight_decay=1e-2)
    generator.train()
    for _ in range(steps):
        y = present[torch.randint(len(present), (batch,), generator=g)]
        noise = torch.rand(batch, noise_dim, generator=g)
        z = generator(y, noise)
        teacher = sum((share[u, y].float() * F.cross_entropy(z @ w.T + b, y, reduction="none")).mean()
                      for u, (w, b) in enumerate(zip(*heads)))
        d_out = (z[:, None] - z[None]).abs().mean(-1)
        d_noise = (noise[:, None] - noise[None]).pow(2).mean(-1)
        opt.zero_grad()
        (teacher + torch.exp(-(d_noise * d_out).mean())).backward()
        opt.step()


def test_fedgen_rounds_train_the_generator_then_regularise_the_client_step():
    """FedGen (Zhu et al., ICML'21; notes §2.6 ``Training_FedGen.py``).  Round 1: plain local SGD,
    then the server trains the generator G on the clients' heads (Eq. (4)).  Round 2: each client's
    step descends CE(f(x), y) + alpha CE(head(G(y_hat)), y_hat) + beta KL(softmax(head(G(y))) || softmax(f(x)))
    (Eq. (5), G in evaluation mode, y_hat uniform labels): the step differs from the plain CE step by
    exactly -lr grad(alpha CE + beta KL) (autograd, one client at a time)."""
    data = make_data([8, 8, 8])
    hp = LocalSGD(epochs=1, batch_size=8, lr=0.3)  # one full batch: one step per client and round
    model = mlp()
    fed = make_federation(data, model, hp, participation=2 / 3, seed=5)
    alpha, beta, noise_dim, batch, lr_g = 1.0, 2.0, 4, 8, 1e-2
    algorithm = ALGORITHMS["fedgen"](generative_alpha=alpha, generative_beta=beta, noise_dim=noise_dim, hidden=8,
                                     generator_epochs=1, teacher_iterations=3, generator_batch=batch, generator_lr=lr_g)
    state = algorithm.init(fed, model_weights(model))
    generator = copy.deepcopy(state["generator"])
    untrained = model_weights(generator)
    g = torch.Generator()
    g.set_state(fed.generator.get_state())  # FedGen's own draws (its generator's labels and noise)
    streams = Streams(5)  # the rounds' samples and batches

    w = state["global"]
    streams.begin(1)
    chosen, trained = sample_and_train(data, model, hp, streams, [w, w], 2)
    heads = (torch.stack([t["3.weight"] for t in trained]), torch.stack([t["3.bias"] for t in trained]))
    train_generator_by_hand(generator, heads, label_counts(data, chosen.tolist()), g, 3, batch, noise_dim, lr_g)
    fed.begin_round(1)
    state, _ = algorithm.round(fed, state, 1)
    assert_weights_close(state["global"], mean_of(trained))
    assert_weights_close(model_weights(state["generator"]), model_weights(generator), atol=1e-6)
    assert max(float((v - untrained[k]).abs().max()) for k, v in model_weights(generator).items()) > 1e-2

    w = state["global"]
    streams.begin(2)
    chosen = streams.sample(3, 2)
    plan = make_batch_plan(data.train.counts[chosen], 1, batch, streams.clients("batches", chosen))
    xy = [client_rows(data, int(c), plan.client_batches(i)[0]) for i, c in enumerate(chosen)]
    generator.eval()
    with torch.no_grad():  # the generated head inputs of the step, both clients' rows drawn at once
        z = generator(torch.cat([y for _, y in xy]), torch.rand(2 * batch, noise_dim, generator=g)).view(2, batch, -1)
        y_hat = torch.randint(3, (2, batch), generator=g)
        z_hat = generator(y_hat.flatten(), torch.rand(2 * batch, noise_dim, generator=g)).view(2, batch, -1)
    fed.begin_round(2)
    state, _ = algorithm.round(fed, state, 2)

    plain, regularised, moved = [], [], 0.0
    for i, (x, y) in enumerate(xy):
        net = copy.deepcopy(model)
        net.load_state_dict(w)
        params = dict(net.named_parameters())
        logits = net(x)
        ce_grad = torch.autograd.grad(F.cross_entropy(logits, y), list(params.values()), retain_graph=True)
        head = net[3]
        with torch.no_grad():
            target = torch.softmax(head(z[i]), 1)
        kl = (target * (target.log() - torch.log_softmax(logits, 1))).sum(1).mean()
        reg_grad = torch.autograd.grad(alpha * F.cross_entropy(head(z_hat[i]), y_hat[i]) + beta * kl, list(params.values()))
        plain.append({n: w[n] - hp.lr * gc for n, gc in zip(params, ce_grad)})
        regularised.append({n: plain[-1][n] - hp.lr * gr for n, gr in zip(params, reg_grad)})
        moved = max(moved, max(float(gr.abs().max()) for gr in reg_grad) * hp.lr)
    assert_weights_close(state["global"], mean_of(regularised), atol=1e-6)
    assert moved > 1e-2  # the regulariser moves the step visibly away from plain SGD
    assert state["trained_generator"] and len(state["generator_losses"]) == 2


# ---- FedASAM ----------------------------------------------------------------------------


@pytest.mark.parametrize("sizes, participation", [([12, 12, 12], 1 / 3), ([12, 6, 9, 15], 0.5)])
def test_fedasam_round_takes_adaptive_sharpness_aware_steps(sizes, participation):
    """FedASAM (Caldarola et al., ECCV'22; ASAM, Kwon et al. 2021, Eq. (11)-(12); notes §2.6
    ``utils/sam_minimizers.py``): per minibatch g = grad L(w), T = |w| + eta on "weight"
    parameters (1 on biases), eps = rho T^2 g / ||T g||, and the SGD step from w uses
    grad L(w + eps); the server takes the sample-weighted average of the clients' models (FedAvg).
    One client of three, then two of four with different sample counts, checked against the
    hand-written steps."""
    data = make_data(sizes)
    hp = LocalSGD(epochs=1, batch_size=6, lr=0.5)
    model = mlp()
    fed = make_federation(data, model, hp, participation=participation, seed=6)
    rho, eta = 0.5, 0.01
    algorithm = ALGORITHMS["fedasam"](rho=rho, eta=eta)
    state = algorithm.init(fed, model_weights(model))
    fed.begin_round(1)
    state, _ = algorithm.round(fed, state, 1)

    streams = Streams(6)
    streams.begin(1)
    m = max(1, round(participation * len(sizes)))
    chosen = streams.sample(len(sizes), m)
    plan = make_batch_plan(data.train.counts[chosen], 1, 6, streams.clients("batches", chosen))
    trained, sam_moved_further = [], 0.0
    for i, client in enumerate(chosen.tolist()):
        net = copy.deepcopy(model)
        named = dict(net.named_parameters())
        for positions in plan.client_batches(i):
            x, y = client_rows(data, client, positions)
            grads = torch.autograd.grad(F.cross_entropy(net(x), y), list(named.values()))
            with torch.no_grad():
                scale = {n: p.abs() + eta if "weight" in n else torch.ones_like(p) for n, p in named.items()}
                norm = torch.sqrt(sum(((scale[n] * gr) ** 2).sum() for n, gr in zip(named, grads)))
                eps = {n: rho * scale[n] ** 2 * gr / norm for n, gr in zip(named, grads)}
            perturbed = {n: (p + eps[n]).detach().requires_grad_() for n, p in named.items()}
            logits = torch.func.functional_call(net, perturbed, (x,))
            sharp = torch.autograd.grad(F.cross_entropy(logits, y), list(perturbed.values()))
            with torch.no_grad():
                for (n, p), gs, gr in zip(named.items(), sharp, grads):
                    sam_moved_further = max(sam_moved_further, float((gs - gr).abs().max()) * hp.lr)
                    p -= hp.lr * gs
        trained.append(model_weights(net))
    if m > 1:
        assert len({sizes[c] for c in chosen.tolist()}) == m  # the weights matter: the counts differ
    assert_weights_close(state["global"], mean_of(trained, [sizes[c] for c in chosen.tolist()]), atol=1e-6)
    assert sam_moved_further > 1e-3  # the perturbed gradient differs visibly from plain SGD's
    assert (ALGORITHMS["fedasam"]().rho, ALGORITHMS["fedasam"]().eta) == (0.1, 0.0)  # the code's hard-coded values

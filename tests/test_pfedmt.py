"""pFedMT (Algorithm 1) against closed forms on quadratic device losses, and whole rounds through the
federation replayed device by device on real minibatches."""

import numpy as np
import pytest
import torch
from conftest import Streams, ce_gradient, make_data, make_federation
from torch import nn

from fedbench.algorithms.pfedmt import (
    ALGORITHMS,
    aggregation_weights,
    global_update,
    pfedmt_round,
)
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights

DT = torch.float64


def quadratic_gradient(c: torch.Tensor):
    """f_ij(theta) = 1/2 ||theta - c_ij||^2  ->  grad = theta - c_ij (no loss reported)."""
    return lambda theta, k, l: ({"p": theta["p"] - c}, None)


def setup(teams, dim=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    team_of = torch.tensor(teams)
    c = torch.randn(len(teams), dim, generator=g, dtype=DT) * 3
    x0 = torch.randn(dim, generator=g, dtype=DT)
    return team_of, c, x0


def run_rounds(x0, team_of, c, rounds, weighting="uniform", sizes=None, **hp):
    sizes = torch.ones(len(team_of)) if sizes is None else sizes
    A, tau = aggregation_weights(team_of, sizes, weighting)
    x = {"p": x0}
    theta = None
    for _ in range(rounds):
        x, theta, _ = pfedmt_round(x, team_of, A, tau, quadratic_gradient(c), **hp)
    return x["p"], theta["p"]


HP = {"team_iterations": 7, "local_iterations": 5, "alpha": 0.1, "eta": 0.2, "lam": 2.0, "gamma": 0.7, "beta": 1.0}


def test_quadratic_fixed_point_matches_closed_form():
    """Closed form of one round for f_ij = 1/2 ||theta - c_ij||^2 (exact for finite K, L).

    Device loop (Eq. 10) from theta = w: the map theta -> theta - alpha((theta - c) + lam (theta - w))
    contracts with rho = 1 - alpha (1 + lam) towards theta*(w) = (c + lam w) / (1 + lam), so after L steps
        theta_L = w + s (c - w) / (1 + lam),   s = 1 - rho^L           (s -> 1 as L -> inf).
    Team step (Eq. 7) with uniform delta and c_bar_i = team mean of c_ij:
        w <- (1 - eta lam - eta gamma) w + eta gamma x + eta lam (w + s (c_bar_i - w) / (1 + lam))
           = w - eta gamma (w - x) - eta mu (w - c_bar_i),   mu = lam s / (1 + lam),
    a contraction (factor q = 1 - eta (gamma + mu)) to w_i*(x) = (gamma x + mu c_bar_i) / (gamma + mu); from
    w = x after k team steps:  w_i^k = x + r_k mu / (gamma + mu) (c_bar_i - x),  r_k = 1 - q^k.
    Global step (Eq. 4): x <- (1 - beta gamma) x + beta gamma sum_i tau_i w_i^K, whose fixed point solves
    sum_i tau_i r_K mu / (gamma + mu) (c_bar_i - x) = 0, i.e. x* = sum_i tau_i c_bar_i = the average over
    teams of the team averages of c_ij (independent of K, L).  At x*:
        w_i* = x* + r_K mu / (gamma + mu) (c_bar_i - x*)   (-> (gamma x* + mu c_bar_i) / (gamma + mu) as K -> inf),
    and the personalised models (last local loop starts from w_i^{K-1}):
        theta_ij* = w_i^{K-1} + s (c_ij - w_i^{K-1}) / (1 + lam)   (-> (c_ij + lam w_i*) / (1 + lam) as L, K -> inf).
    """
    teams = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    team_of, c, x0 = setup(teams)
    x, theta = run_rounds(x0, team_of, c, rounds=300, **HP)

    K, L, a, eta, lam, gamma = (HP[k] for k in ("team_iterations", "local_iterations", "alpha", "eta", "lam", "gamma"))
    c_bar = torch.stack([c[team_of == i].mean(0) for i in range(3)])
    x_star = c_bar.mean(0)
    torch.testing.assert_close(x, x_star, rtol=0, atol=1e-9)

    s = 1 - (1 - a * (1 + lam)) ** L
    mu = lam * s / (1 + lam)
    q = 1 - eta * (gamma + mu)
    w_km1 = x_star + (1 - q ** (K - 1)) * mu / (gamma + mu) * (c_bar - x_star)
    theta_star = w_km1[team_of] + s * (c - w_km1[team_of]) / (1 + lam)
    torch.testing.assert_close(theta, theta_star, rtol=0, atol=1e-9)


def test_quadratic_long_loops_reach_moreau_fixed_point():
    """With K, L large the loops solve their subproblems: theta_ij* = (c_ij + lam w_i*) / (1 + lam) and
    w_i* = (gamma x* + mu c_bar_i) / (gamma + mu) with mu = lam / (1 + lam) (the Moreau-envelope gradient of
    the quadratic team loss is mu (w - c_bar_i)); x* = mean over teams of team means of c_ij."""
    teams = [0, 0, 1, 1, 1, 1]  # unequal team sizes: uniform tau still averages the team means
    team_of, c, x0 = setup(teams, seed=1)
    hp = dict(HP, team_iterations=100, local_iterations=60)
    x, theta = run_rounds(x0, team_of, c, rounds=60, **hp)
    lam, gamma = hp["lam"], hp["gamma"]
    c_bar = torch.stack([c[team_of == i].mean(0) for i in range(2)])
    x_star = c_bar.mean(0)
    mu = lam / (1 + lam)
    w_star = (gamma * x_star + mu * c_bar) / (gamma + mu)
    torch.testing.assert_close(x, x_star, rtol=0, atol=1e-8)
    torch.testing.assert_close(theta, (c + lam * w_star[team_of]) / (1 + lam), rtol=0, atol=1e-8)


def test_sample_weighting_fixed_point_is_sample_weighted_mean():
    """weighting="samples": delta_j = n_j / n_i, tau_i = n_i / n, so x* = sum_i tau_i sum_j delta_j c_ij
    = sum_ij n_ij c_ij / n (the sample-weighted mean of all c_ij)."""
    teams = [0, 0, 1, 1, 1]
    team_of, c, x0 = setup(teams, seed=2)
    sizes = torch.tensor([5, 1, 2, 7, 3])
    x, _ = run_rounds(x0, team_of, c, rounds=300, weighting="samples", sizes=sizes, **HP)
    expected = (sizes[:, None].to(DT) * c).sum(0) / sizes.sum()
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-9)


def test_large_lambda_collapses_devices_onto_team_model():
    """theta_ij - w_i = s (c_ij - w_i) / (1 + lam): with lam large every device sits on its team model."""
    teams = [0, 0, 0, 1, 1, 1]
    team_of, c, x0 = setup(teams, seed=3)

    def spread(lam, alpha):
        hp = dict(HP, lam=lam, alpha=alpha, eta=0.05)
        _, theta = run_rounds(x0, team_of, c, rounds=50, **hp)
        team_mean = torch.stack([theta[team_of == i].mean(0) for i in range(2)])
        return (theta - team_mean[team_of]).norm(dim=1).max().item()

    small, large = spread(lam=0.5, alpha=0.1), spread(lam=1000.0, alpha=5e-4)
    assert small > 0.3
    assert large < 2e-2 * small
    assert large < (c.norm(dim=1).max().item() * 4) / 1001


def test_global_step_formulas_by_hand():
    x, w_bar = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 4.0])
    beta, gamma = 0.5, 0.4
    # eq4: (1 - 0.2) x + 0.2 w_bar = [0.8 + 0.6, -1.6 + 0.8]
    torch.testing.assert_close(global_update(x, w_bar, beta, gamma, "eq4"), torch.tensor([1.4, -0.8]))
    # algorithm1: (1 - 0.2) x + 0.5 w_bar = [0.8 + 1.5, -1.6 + 2.0]
    torch.testing.assert_close(global_update(x, w_bar, beta, gamma, "algorithm1"), torch.tensor([2.3, 0.4]))
    # without a rule: Eq. (4), the default of PFedMT's global_step (the PerMFL_1 code's step)
    torch.testing.assert_close(global_update(x, w_bar, beta, gamma), torch.tensor([1.4, -0.8]))
    # beta = gamma = 1: both are x <- w_bar ("aggregation and update coincide", Sec. 3.2)
    for rule in ("eq4", "algorithm1"):
        torch.testing.assert_close(global_update(x, w_bar, 1.0, 1.0, rule), w_bar)
    with pytest.raises(ValueError):
        global_update(x, w_bar, beta, gamma, "bogus")


def test_algorithm1_global_step_used_in_round():
    """K = 0 leaves w_i = x, so w_bar = x and one round gives (1 - beta gamma) x + beta x under "algorithm1"
    (a drift of beta (1 - gamma) x), and x unchanged under "eq4"."""
    team_of, c, x0 = setup([0, 1])
    A, tau = aggregation_weights(team_of, torch.ones(2), "uniform")
    hp = dict(HP, team_iterations=0, beta=0.5, gamma=0.4)
    x4, _, _ = pfedmt_round({"p": x0}, team_of, A, tau, quadratic_gradient(c), global_step="eq4", **hp)
    x1, _, _ = pfedmt_round({"p": x0}, team_of, A, tau, quadratic_gradient(c), global_step="algorithm1", **hp)
    torch.testing.assert_close(x4["p"], x0)
    torch.testing.assert_close(x1["p"], (1 - 0.2) * x0 + 0.5 * x0)


def test_aggregation_weights_by_hand_with_an_empty_team_and_fractional_sizes():
    """Alg. 1 lines 8 and 11 by samples: delta_j = n_ij / n_i within team i, tau_i = n_i / n.  Teams
    [0, 0, 1, 1, 2, 2] holding n = [3, 1, 0, 0, 1, 0]: team 0 delta (3/4, 1/4), tau 4/5; team 2 (one
    sample in all) delta (1, 0), tau 1/5; team 1 holds no sample: tau 0 and, as the docstring says,
    uniform delta (1/2, 1/2), so its team model (Eq. 7) stays a finite mix of its devices.  Both are
    ratios, so the sizes given as fractions of the data (n / 1000) give the same A and tau.  By the
    PerMFL_1 code's uniform weighting: delta_j = 1 / N_i, tau_i = 1 / M."""
    team_of = torch.tensor([0, 0, 1, 1, 2, 2])
    n = torch.tensor([3, 1, 0, 0, 1, 0])
    A_samples = torch.tensor([[3 / 4, 1 / 4, 0, 0, 0, 0], [0, 0, 1 / 2, 1 / 2, 0, 0], [0, 0, 0, 0, 1, 0]], dtype=DT)
    A_uniform = torch.tensor([[1 / 2, 1 / 2, 0, 0, 0, 0], [0, 0, 1 / 2, 1 / 2, 0, 0], [0, 0, 0, 0, 1 / 2, 1 / 2]], dtype=DT)
    for sizes in (n, n.to(DT) / 1000):
        A, tau = aggregation_weights(team_of, sizes, "samples")
        torch.testing.assert_close(A, A_samples)
        torch.testing.assert_close(tau, torch.tensor([4 / 5, 0, 1 / 5], dtype=DT))
        A, tau = aggregation_weights(team_of, sizes, "uniform")
        torch.testing.assert_close(A, A_uniform)
        torch.testing.assert_close(tau, torch.full((3,), 1 / 3, dtype=DT))


def test_one_gradient_per_local_iteration_and_the_loss_is_the_mean_over_the_K_L_steps():
    """Algorithm 1's loops: for k < K team iterations (line 3) and l < L local iterations (line 5) every
    device's gradient is asked once, as ``device_gradient(theta, k, l)``, in that order.  The round's loss
    is each device's mean of f_ij over its K L steps, by hand for f_ij = 1/2 ||theta - c_ij||^2 (teams
    [0, 0, 1], uniform weights, so theta_bar_i is a plain team mean):
    * K = L = 1: the only step is at theta = w_i^{t,0} = x (lines 2 and 4): the loss is f_ij(x);
    * K = 1, L = 2: Eq. (10) at theta = w_i has no pull, so the second step is at x - alpha (x - c_ij);
    * K = 2, L = 1: Eq. (7) with theta_bar_i = x - alpha (x - c_bar_i) gives the second team iteration's
      start w_i^{t,1} = x - eta lam alpha (x - c_bar_i)."""
    team_of, c, x0 = setup([0, 0, 1])
    A, tau = aggregation_weights(team_of, torch.ones(3), "uniform")
    calls = []

    def gradient(theta, k, l):
        calls.append((k, l))
        d = theta["p"] - c
        return {"p": d}, 0.5 * d.pow(2).sum(1)

    def loss_of(K, L):
        calls.clear()
        _, _, loss = pfedmt_round({"p": x0}, team_of, A, tau, gradient, **dict(HP, team_iterations=K, local_iterations=L))
        assert calls == [(k, l) for k in range(K) for l in range(L)]
        return loss

    f = lambda theta: 0.5 * (theta - c).pow(2).sum(1)  # noqa: E731
    a, eta, lam = HP["alpha"], HP["eta"], HP["lam"]
    c_bar = torch.stack([c[:2].mean(0), c[:2].mean(0), c[2]])
    torch.testing.assert_close(loss_of(1, 1), f(x0))
    torch.testing.assert_close(loss_of(1, 2), (f(x0) + f(x0 - a * (x0 - c))) / 2)
    torch.testing.assert_close(loss_of(2, 1), (f(x0) + f(x0 - eta * lam * a * (x0 - c_bar))) / 2)
    loss_of(2, 3)


def pfedmt_by_hand(fed, x, team, rounds, hp, weighting, global_step):
    """Algorithm 1 device by device and team by team, on the federation's minibatch draws: at every
    team iteration each device draws L minibatches (``MinibatchGradients.draw``, pinned in
    test_device_gradient.py) and takes L steps of Eq. (10) from w_i; line 8 delta_j, line 11 tau_i by
    samples (n_ij / n_i, n_i / n) or uniformly (1 / N_i, 1 / M)."""
    from fedbench.engine.device_gradient import MinibatchGradients

    data = fed.data
    n = data.train.counts.double()
    teams = sorted(set(team))
    members = {i: [j for j, tj in enumerate(team) if tj == i] for i in teams}
    if weighting == "samples":
        delta = {j: n[j] / n[members[team[j]]].sum() for j in range(len(team))}
        tau = {i: n[members[i]].sum() / n.sum() for i in teams}
    else:
        delta = {j: 1 / len(members[team[j]]) for j in range(len(team))}
        tau = {i: 1 / len(teams) for i in teams}
    oracle = MinibatchGradients(fed.model, data, data.train, fed.local.batch_size)
    streams, everyone = Streams(fed.seed), torch.arange(len(team))
    a, eta, lam, gamma, beta = (hp[k] for k in ("alpha", "eta", "lam", "gamma", "beta"))
    device_lam = hp.get("device_lam", lam)  # Eq. (10)'s coupling; the team step (Eq. 7) keeps lam
    for t in range(1, rounds + 1):
        streams.begin(t)
        loss = torch.zeros(len(team))  # mean device loss over the round's K * L steps
        w = {i: dict(x) for i in teams}  # line 2: w_i^{t,0} = x^t
        for _ in range(hp["team_iterations"]):
            rows = oracle.draw(hp["local_iterations"], everyone, streams.clients("minibatches", everyone)).rows
            theta = [dict(w[team[j]]) for j in everyone]  # line 4
            for j in everyone.tolist():
                for l in range(hp["local_iterations"]):  # line 6 / Eq. (10)
                    if n[j] == 0:  # a device without training rows: no data gradient and no loss, only the pull
                        grad, value = {p: torch.zeros_like(theta[j][p]) for p in x}, 0.0
                    else:
                        grad, value = ce_gradient(fed.model, theta[j], data.x[rows[l, j]], data.y[rows[l, j]])
                    loss[j] += value / (hp["team_iterations"] * hp["local_iterations"])
                    theta[j] = {p: theta[j][p] - a * grad[p] - a * device_lam * (theta[j][p] - w[team[j]][p]) for p in x}
            for i in teams:  # lines 8-9 / Eq. (7)
                bar = {p: sum(delta[j] * theta[j][p] for j in members[i]) for p in x}
                w[i] = {p: (1 - eta * lam - eta * gamma) * w[i][p] + eta * gamma * x[p] + eta * lam * bar[p] for p in x}
        w_bar = {p: sum(tau[i] * w[i][p] for i in teams) for p in x}  # line 11
        mix = beta * gamma if global_step == "eq4" else beta  # line 12 (Eq. 4) or as printed
        x = {p: (1 - beta * gamma) * x[p] + mix * w_bar[p] for p in x}
    return x, theta, loss


@pytest.mark.parametrize(
    "teams, weighting, global_step",
    [([7, 7, 3, 3, 3], "samples", "eq4"), ([7, 7, 3, 3, 3], "uniform", "algorithm1"), (None, "samples", "algorithm1")],
    ids=["two-teams-samples-eq4", "two-teams-uniform-algorithm1", "no-teams"],
)
def test_rounds_through_the_federation_by_hand(teams, weighting, global_step):
    """pFedMT (Algorithm 1) through ``ALGORITHMS["pfedmt"]`` on an MLP and real minibatches, two rounds of
    K = L = 2 against :func:`pfedmt_by_hand`: devices in their teams (arbitrary labels, unequal teams;
    no teams = one team of everybody), the device/team/global tiers and their weights, the
    personalised model theta_ij after the last local loop (PerMFL code's local_model), and the
    round's loss (each device's mean minibatch loss over its K * L steps)."""
    data = make_data([6, 2, 5, 3, 4], test=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=3, lr=0.1), seed=3)
    fed.teams = None if teams is None else np.array(teams)
    hp = {"team_iterations": 2, "local_iterations": 2, "alpha": 0.1, "eta": 0.2, "lam": 2.0, "gamma": 0.5, "beta": 0.8}
    algo = ALGORITHMS["pfedmt"](**hp, weighting=weighting, global_step=global_step)
    initial = model_weights(model)
    state = algo.init(fed, initial)
    for t in (1, 2):
        fed.begin_round(t)
        state, loss = algo.round(fed, state, t)

    team = [0] * 5 if teams is None else teams
    x, theta, expected_loss = pfedmt_by_hand(fed, initial, team, 2, hp, weighting, global_step)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-4)
    for p in x:
        torch.testing.assert_close(algo.global_model(fed, state)[p], x[p], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(algo.client_models(fed, state, 2)[p], torch.stack([th[p] for th in theta]), atol=1e-5, rtol=1e-4)


def two_uniform_rounds(sizes: list[int], hp: dict, seed: int):
    """Two rounds of pFedMT (uniform weights) on an MLP over clients of ``sizes`` rows in teams 7, 7, 3, 3, 3:
    the federation, the algorithm, its state and last losses, the initial weights, the teams."""
    data = make_data(sizes, test=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=3, lr=0.1), seed=seed)
    teams = [7, 7, 3, 3, 3]
    fed.teams = np.array(teams)
    algo = ALGORITHMS["pfedmt"](**hp, weighting="uniform")
    initial = model_weights(model)
    state = algo.init(fed, initial)
    for t in (1, 2):
        fed.begin_round(t)
        state, loss = algo.round(fed, state, t)
    return fed, algo, state, loss, initial, teams


def test_a_device_without_training_rows_takes_only_the_proximal_pull():
    """pFedMT (Algorithm 1, line 6 / Eq. 10) with device 1 holding no training rows: its f_ij contributes no
    gradient, so theta_1j <- theta_1j - alpha lam (theta_1j - w_i) only (from theta = w_i it stays on its team
    model), and its loss is 0.  Uniform delta (line 8) puts its theta into its team's model, so the whole
    round is compared with :func:`pfedmt_by_hand` (two rounds, K = L = 2, two teams)."""
    hp = {"team_iterations": 2, "local_iterations": 2, "alpha": 0.1, "eta": 0.2, "lam": 2.0, "gamma": 0.5, "beta": 0.8}
    fed, algo, state, loss, initial, teams = two_uniform_rounds([6, 0, 5, 3, 4], hp, seed=5)
    x, theta, expected_loss = pfedmt_by_hand(fed, initial, teams, 2, hp, "uniform", "eq4")
    assert expected_loss[1] == 0
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-4)
    for p in x:
        torch.testing.assert_close(algo.global_model(fed, state)[p], x[p], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(algo.client_models(fed, state, 2)[p], torch.stack([th[p] for th in theta]), atol=1e-5, rtol=1e-4)


def test_a_round_without_team_or_local_iterations_trains_nothing():
    """Algorithm 1 with empty inner loops, through the federation.  K = 0: no team iteration, so
    w_i^{t,K} = x^t (line 2), w_bar = x^t (line 11) and line 12 gives x under Eq. 4 and
    (1 - beta gamma + beta) x as printed; no device trains, so every personalised model is kept and the
    round's loss is 0 for every device.  L = 0 (K = 1): theta_ij = w_i^{t,0} = x (line 4, no local step),
    the team step (Eq. 7) gives (1 - eta lam - eta gamma) x + eta gamma x + eta lam x = x, so x is kept and
    every personalised model becomes x; the loss is again 0."""
    data = make_data([4, 3, 5], test=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=2, lr=0.1), seed=1)
    fed.teams = np.array([0, 0, 1])
    hp = {"alpha": 0.1, "eta": 0.2, "lam": 2.0, "gamma": 0.5, "beta": 0.8}
    trained = ALGORITHMS["pfedmt"](team_iterations=1, local_iterations=1, **hp)
    state, _ = trained.round(fed, trained.init(fed, model_weights(model)), 1)  # personal models differ from x
    x, personal = state["global"], state["personal"]
    assert not torch.allclose(personal["1.weight"], x["1.weight"].expand_as(personal["1.weight"]))
    zero = torch.zeros(3)
    for global_step, factor in (("eq4", 1.0), ("algorithm1", 1 - 0.8 * 0.5 + 0.8)):
        algo = ALGORITHMS["pfedmt"](team_iterations=0, local_iterations=1, global_step=global_step, **hp)
        new, loss = algo.round(fed, state, 2)
        torch.testing.assert_close(loss, zero)
        for p in x:
            torch.testing.assert_close(new["global"][p], factor * x[p])
            torch.testing.assert_close(new["personal"][p], personal[p])
    algo = ALGORITHMS["pfedmt"](team_iterations=1, local_iterations=0, **hp)
    new, loss = algo.round(fed, state, 2)
    torch.testing.assert_close(loss, zero)
    for p in x:
        torch.testing.assert_close(new["global"][p], x[p])
        torch.testing.assert_close(new["personal"][p], x[p].expand_as(personal[p]))


def test_rejects_unknown_options():
    with pytest.raises(ValueError):
        ALGORITHMS["pfedmt"](global_step="line12")
    with pytest.raises(ValueError):
        ALGORITHMS["pfedmt"](weighting="equal")


def test_device_lambda_enters_the_device_step_and_lambda_the_team_step_by_hand():
    """``device_lam`` (the PerMFL_1 code's device-level lambda, local_epochs = 20 by a positional slip):
    one round, one team of two devices, K = 1, L = 2, f_j(theta) = 1/2 (theta - c_j)^2 with c = (1, 3),
    x^0 = 1, alpha = 0.1, lam_d = 4 (device), lam = 2 (team), eta = 0.2, gamma = 0.5, beta = 1, uniform
    weights.  Device steps (Eq. 10) from theta = w = 1:
        theta_1 = 1 - 0.1 (1 - c) = 0.9 + 0.1 c                                  -> (1.0, 1.2)
        theta_2 = theta_1 - 0.1 ((theta_1 - c) + 4 (theta_1 - 1)) = 0.5 theta_1 + 0.1 c + 0.4 -> (1.0, 1.3)
    team step (Eq. 7) with lam = 2:  w = (1 - 0.4 - 0.1) 1 + 0.1 * 1 + 0.4 * mean(1.0, 1.3) = 1.06
    (with lam_d = 4 in the team step too it would be 1.12); global step (Eq. 4):  x = 0.5 + 0.5 * 1.06 = 1.03.
    device_lam None is lam in both tiers (the paper's single lambda)."""
    team_of, c, x0 = torch.tensor([0, 0]), torch.tensor([[1.0], [3.0]], dtype=DT), torch.tensor([1.0], dtype=DT)
    hp = dict(team_iterations=1, local_iterations=2, alpha=0.1, eta=0.2, gamma=0.5, beta=1.0)
    x, theta = run_rounds(x0, team_of, c, rounds=1, lam=2.0, device_lam=4.0, **hp)
    torch.testing.assert_close(theta, torch.tensor([[1.0], [1.3]], dtype=DT), rtol=0, atol=1e-12)
    torch.testing.assert_close(x, torch.tensor([1.03], dtype=DT), rtol=0, atol=1e-12)
    for single in (dict(device_lam=None), dict()):  # the paper: one lambda, here 2 in both tiers
        x_one, _ = run_rounds(x0, team_of, c, rounds=1, lam=2.0, **single, **hp)
        x_two, _ = run_rounds(x0, team_of, c, rounds=1, lam=2.0, device_lam=2.0, **hp)
        torch.testing.assert_close(x_one, x_two, rtol=0, atol=0)
    assert ALGORITHMS["pfedmt"]().device_lam is None
    assert ALGORITHMS["pfedmt"](lam=15.0, device_lam=20.0).device_lam == 20.0
    with pytest.raises(ValueError, match="device_lam"):
        ALGORITHMS.check_params("pfedmt", {"device_lam": 0.0}, "algorithms.x")


def test_device_lambda_through_the_federation_by_hand():
    """``ALGORITHMS["pfedmt"](device_lam=...)`` on an MLP and real minibatches against
    :func:`pfedmt_by_hand` with the device step's lambda (3.0) apart from the team step's (2.0): two rounds
    of K = L = 2, two unequal teams, uniform weights (the PerMFL_1 code's reading)."""
    hp = {"team_iterations": 2, "local_iterations": 2, "alpha": 0.1, "eta": 0.2, "lam": 2.0, "gamma": 0.5, "beta": 0.8,
          "device_lam": 3.0}
    fed, algo, state, loss, initial, teams = two_uniform_rounds([6, 2, 5, 3, 4], hp, seed=3)
    x, theta, expected_loss = pfedmt_by_hand(fed, initial, teams, 2, hp, "uniform", "eq4")
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-4)
    for p in x:
        torch.testing.assert_close(algo.global_model(fed, state)[p], x[p], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(algo.client_models(fed, state, 2)[p], torch.stack([th[p] for th in theta]), atol=1e-5, rtol=1e-4)
    firsts = []
    for device_lam in (3.0, None):  # the same minibatches: only the device step's lambda differs
        fed.begin_round(1)
        one = ALGORITHMS["pfedmt"](**{**hp, "device_lam": device_lam}, weighting="uniform")
        firsts.append(one.round(fed, one.init(fed, initial), 1)[0]["global"]["1.weight"])
    assert not torch.allclose(*firsts)

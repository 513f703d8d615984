"""pFedMT (Algorithm 1) against closed forms on quadratic device losses, plus a smoke run."""

import numpy as np
import pytest
import torch
from conftest import make_data, make_federation
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


def test_smoke_run_through_federation():
    data = make_data([12, 7, 15, 10, 9, 20])
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=4, lr=0.1), seed=3)
    fed.teams = np.array([5, 5, 2, 2, 2, 9])  # arbitrary labels, unequal teams
    algo = ALGORITHMS["pfedmt"](team_iterations=3, local_iterations=4)
    initial = model_weights(model)
    state = algo.init(fed, initial)
    for t in (1, 2):
        state, loss = algo.round(fed, state, t)
        assert loss.shape == (6,) and torch.isfinite(loss).all()
    pm, gm = algo.client_models(fed, state, 2), algo.global_model(fed, state)
    for k, v in initial.items():
        assert pm[k].shape == (6, *v.shape)
        assert gm[k].shape == v.shape
        assert not torch.equal(gm[k], v)
    flat = torch.cat([pm[k].reshape(6, -1) for k in sorted(pm)], 1)
    assert torch.cdist(flat, flat).add(torch.eye(6)).min() > 0  # every device has its own model

    # the same stream gives the same run; no teams = one team of everybody
    fed2 = make_federation(data, model, LocalSGD(epochs=1, batch_size=4, lr=0.1), seed=3)
    fed2.teams = np.array([5, 5, 2, 2, 2, 9])
    state2 = algo.init(fed2, initial)
    for t in (1, 2):
        state2, _ = algo.round(fed2, state2, t)
    for k in pm:
        torch.testing.assert_close(state2["personal"][k], pm[k])
    fed2.teams = None
    state3, _ = algo.round(fed2, algo.init(fed2, initial), 1)
    assert state3["personal"]["1.weight"].shape == (6, 8, 5)


def test_rejects_unknown_options():
    with pytest.raises(ValueError):
        ALGORITHMS["pfedmt"](global_step="line12")
    with pytest.raises(ValueError):
        ALGORITHMS["pfedmt"](weighting="equal")

"""pFedMe, Per-FedAvg and FedAvg in minibatch steps, checked by hand on quadratic client losses.

The algorithms run unchanged; only the gradient oracle is swapped for f_i(theta) = 1/2 ||theta - c_i||^2
(gradient theta - c_i), so every iterate has a closed form.  The last tests run whole rounds on real
minibatches through the real oracle and replay them client by client with plain autograd.
"""

import numpy as np
import pytest
import torch
from conftest import Streams, ce_gradient, make_data, make_federation
from fedbench.engine.streams import client_streams
from torch import nn

from fedbench.algorithms import ALGORITHMS
from fedbench.engine.device_gradient import GradientOracle
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights

DT = torch.float64


class Point(nn.Module):
    """A model that is one parameter vector ``p`` (only the oracle reads it)."""

    def __init__(self, dim: int):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(dim, dtype=DT))


class QuadraticOracle(GradientOracle):
    """Stands in for MinibatchGradients: f_i(theta) = 1/2 ||theta - c_i||^2, gradient theta - c_i, and
    the loss f_i at the point asked for; records the splits asked for."""

    def __init__(self, c: torch.Tensor, calls: list):
        self.c, self.calls = c, calls

    def draw(self, steps, clients, generator):
        return torch.zeros(steps, 2, len(clients), 1, dtype=torch.long)  # batches[s]: a stand-in (x, y)

    def __call__(self, params, rows, clients, buffers=None):
        diff = params["p"] - self.c[clients]
        return {"p": diff}, 0.5 * diff.pow(2).sum(1)


def quadratic_federation(sizes, c, x0, lr=0.1, participation=1.0):
    data = make_data(sizes)
    model = Point(c.shape[1])
    with torch.no_grad():
        model.p.copy_(x0)
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=1, lr=lr), participation=participation)
    calls = []
    fed.minibatch_gradients = lambda split="train": calls.append(split) or QuadraticOracle(c, calls)
    return fed, model_weights(model), calls


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(0)
    c = torch.randn(3, 2, generator=g, dtype=DT) * 2
    x0 = torch.randn(2, generator=g, dtype=DT)
    sizes = [2, 5, 3]
    weights = torch.tensor(sizes, dtype=DT) / sum(sizes)
    return c, x0, sizes, weights


def test_pfedme_one_round_by_hand(problem):
    """K = 1, R = 1 from theta = w = x:  theta = x - pl (x - c);  w = x - eta lam (x - theta) = x - eta lam pl (x - c);
    x' = (1 - beta) x + beta sum_i n_i/n w_i."""
    c, x0, sizes, p = problem
    lam, pl, eta, beta = 2.0, 0.1, 0.05, 0.7
    fed, initial, _ = quadratic_federation(sizes, c, x0, lr=eta)
    algo = ALGORITHMS["pfedme"](lam=lam, personal_lr=pl, inner_steps=1, local_steps=1, beta=beta)
    state, _ = algo.round(fed, algo.init(fed, initial), 1)
    theta = x0 - pl * (x0 - c)
    w = x0 - eta * lam * pl * (x0 - c)
    torch.testing.assert_close(state["personal"]["p"], theta)
    torch.testing.assert_close(state["global"]["p"], (1 - beta) * x0 + beta * (p[:, None] * w).sum(0))


def test_pfedme_theta_persists_across_local_rounds(problem):
    """R = 2, K = 1: the second personal step starts from the first theta, not from w."""
    c, x0, sizes, _ = problem
    lam, pl, eta = 2.0, 0.1, 0.05
    fed, initial, _ = quadratic_federation(sizes, c, x0, lr=eta)
    algo = ALGORITHMS["pfedme"](lam=lam, personal_lr=pl, inner_steps=1, local_steps=2, beta=1.0)
    state, _ = algo.round(fed, algo.init(fed, initial), 1)
    theta1 = x0 - pl * (x0 - c)
    w1 = x0 - eta * lam * (x0 - theta1)
    theta2 = theta1 - pl * ((theta1 - c) + lam * (theta1 - w1))
    torch.testing.assert_close(state["personal"]["p"], theta2)


def test_pfedme_global_converges_to_the_sample_weighted_mean(problem):
    """Every client's round is the same affine map of x towards c_i, so the fixed point of
    x = (1 - beta) x + beta sum_i p_i w_i(x) is x* = sum_i p_i c_i."""
    c, x0, sizes, p = problem
    fed, initial, _ = quadratic_federation(sizes, c, x0, lr=0.05)
    algo = ALGORITHMS["pfedme"](lam=5.0, personal_lr=0.05, inner_steps=5, local_steps=10, beta=1.0)
    state = algo.init(fed, initial)
    for t in range(300):
        state, _ = algo.round(fed, state, t)
    torch.testing.assert_close(state["global"]["p"], (p[:, None] * c).sum(0))


def test_perfedavg_one_round_and_adaptation_by_hand(problem):
    """R = 1: temp = x - alpha (x - c); theta = x - beta grad f(temp) = x - beta (1 - alpha)(x - c).
    Personalisation ("paper"): one alpha-step from x on training data; ("code"): an alpha-step then a
    beta-step, on test data."""
    c, x0, sizes, p = problem
    alpha, beta = 0.2, 0.3
    fed, initial, calls = quadratic_federation(sizes, c, x0, lr=alpha)
    algo = ALGORITHMS["perfedavg"](beta=beta, local_steps=1)
    state, _ = algo.round(fed, algo.init(fed, initial), 1)
    x1 = (p[:, None] * (x0 - beta * (1 - alpha) * (x0 - c))).sum(0)
    torch.testing.assert_close(state["global"]["p"], x1)
    torch.testing.assert_close(algo.global_model(fed, state)["p"], x1)  # the GM is the meta-model, not adapted
    assert calls == ["train"]
    torch.testing.assert_close(algo.client_models(fed, state, 1)["p"], x1 - alpha * (x1 - c))
    assert calls[-1] == "train"
    code = ALGORITHMS["perfedavg"](beta=beta, local_steps=1, adaptation="code")
    one = x1 - alpha * (x1 - c)
    torch.testing.assert_close(code.client_models(fed, state, 1)["p"], one - beta * (one - c))
    assert calls[-1] == "test"


def test_round_loss_is_each_clients_mean_loss_over_its_steps_by_hand(problem):
    """The round's per-client training loss (the history's train_loss) is the mean of f_i at the points
    each step's gradient is taken, over all of the round's gradient steps; f_i = 1/2 ||theta - c_i||^2.

    pFedMe (Dinh et al. 2020, Algorithm 1, Eq. 7 by K steps), R = 1 from theta = w = x: the first step is
    at x, the second at theta_1 = x - pl (x - c) (the proximal term lam (theta - w) is 0 at theta = w), so
    K = 1: f(x);  K = 2: (f(x) + (1 - pl)^2 f(x)) / 2.
    Per-FedAvg (Fallah et al. 2020, Algorithm 1, FO): each local round's loss is the inner step's, at theta
    on D; theta_1 = x - beta (1 - alpha)(x - c), so R = 1: f(x);  R = 2: (f(x) + (1 - beta (1 - alpha))^2 f(x)) / 2."""
    c, x0, sizes, _ = problem
    f = 0.5 * (x0 - c).pow(2).sum(1)  # f_i(x) for every client
    lam, pl, eta = 2.0, 0.1, 0.05
    for K, expected in ((1, f), (2, (f + (1 - pl) ** 2 * f) / 2)):
        fed, initial, _ = quadratic_federation(sizes, c, x0, lr=eta)
        algo = ALGORITHMS["pfedme"](lam=lam, personal_lr=pl, inner_steps=K, local_steps=1)
        _, loss = algo.round(fed, algo.init(fed, initial), 1)
        torch.testing.assert_close(loss, expected, check_dtype=False)
    alpha, beta = 0.2, 0.3
    for R, expected in ((1, f), (2, (f + (1 - beta * (1 - alpha)) ** 2 * f) / 2)):
        fed, initial, _ = quadratic_federation(sizes, c, x0, lr=alpha)  # participation 1: every client, in order
        algo = ALGORITHMS["perfedavg"](beta=beta, local_steps=R)
        _, loss = algo.round(fed, algo.init(fed, initial), 1)
        torch.testing.assert_close(loss, expected, check_dtype=False)


def test_fedavg_in_steps_with_one_client_is_plain_sgd(problem):
    """One client, R steps of lr: x_R = c + (1 - lr)^R (x - c) (one client FedAvg = SGD)."""
    c, x0, _, _ = problem
    fed, initial, _ = quadratic_federation([4], c[:1], x0, lr=0.1)
    algo = ALGORITHMS["fedavg"](local_steps=7)
    state, _ = algo.round(fed, algo.init(fed, initial), 1)
    torch.testing.assert_close(state["global"]["p"], c[0] + 0.9**7 * (x0 - c[0]))
    fed.local = LocalSGD(epochs=1, batch_size=1, lr=0.1, momentum=0.5)
    with pytest.raises(ValueError, match="momentum"):
        algo.round(fed, state, 2)


@pytest.mark.parametrize("steps", [1, 3])
def test_fedavg_in_steps_reports_the_mean_loss_of_its_steps(problem, steps):
    """The round's training loss is the mean over the R steps of the loss at each step's start:
    f(x_s) = 1/2 ||x_s - c||^2 with x_s - c = (1 - lr)^s (x - c)."""
    c, x0, _, _ = problem
    fed, initial, _ = quadratic_federation([4], c[:1], x0, lr=0.1)
    algo = ALGORITHMS["fedavg"](local_steps=steps)
    _, loss = algo.round(fed, algo.init(fed, initial), 1)
    gap = 0.5 * (x0 - c[0]).pow(2).sum()
    expected = sum(0.81**s * gap for s in range(steps)) / steps
    torch.testing.assert_close(loss, expected.reshape(1).to(loss.dtype))


@pytest.mark.parametrize("method", ["pfedme", "perfedavg", "fedavg"])
def test_runs_on_real_data_are_deterministic_and_learn(method):
    """MLR on a tiny federation through the real gradient oracle: same seed, same numbers; training helps."""
    from fedbench.engine.evaluate import evaluate_clients

    params = {"fedavg": {"local_steps": 5}, "perfedavg": {"beta": 0.05, "local_steps": 5}, "pfedme": {"personal_lr": 0.05, "beta": 1.0}}[method]
    data = make_data([30, 12, 25, 40], num_classes=3)
    everyone = torch.arange(4)

    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
        fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=8, lr=0.1, weight_decay=0.001), participation=0.5, seed=4)
        algo = ALGORITHMS[method](**params)
        state = algo.init(fed, model_weights(model))
        before = evaluate_clients(model, algo.client_models(fed, state, 0), data, data.train, everyone).pooled_loss
        for t in range(1, 16):
            state, loss = algo.round(fed, state, t)
            assert torch.isfinite(loss).all()
        after = evaluate_clients(model, algo.client_models(fed, state, 15), data, data.train, everyone).pooled_loss
        return state, before, after

    state, before, after = run()
    again, _, _ = run()
    assert after < before
    for k, v in state["global"].items():
        torch.testing.assert_close(again["global"][k], v, rtol=0, atol=0)


def test_mlr_with_l2_is_convex():
    """The l2-regularised MLR objective (cross-entropy + wd/2 ||theta||^2) has a positive definite
    Hessian (smallest eigenvalue >= wd) at random points, and satisfies the convexity inequality."""
    from fedbench.models import build_model

    torch.manual_seed(0)
    model = build_model({"arch": "mlr"}, (6,), 4).double()
    x, y = torch.randn(40, 6, dtype=DT), torch.randint(0, 4, (40,))
    shapes = [(n, p.shape) for n, p in model.named_parameters()]
    wd = 0.01

    def objective(flat):
        params, i = {}, 0
        for n, shape in shapes:
            params[n] = flat[i : i + shape.numel()].view(shape)
            i += shape.numel()
        logits = torch.func.functional_call(model, params, (x,))
        return nn.functional.cross_entropy(logits, y) + wd / 2 * flat.pow(2).sum()

    size = sum(s.numel() for _, s in shapes)
    points = [torch.randn(size, dtype=DT) * 3 for _ in range(4)]
    for point in points:
        hessian = torch.autograd.functional.hessian(objective, point)
        assert torch.linalg.eigvalsh(hessian).min() >= wd - 1e-9
    for a, b in zip(points, points[1:]):
        for t in np.linspace(0, 1, 7):
            assert objective(t * a + (1 - t) * b) <= t * objective(a) + (1 - t) * objective(b) + 1e-12


def test_mnist_half_of_the_grid_runs_on_an_idx_fixture(tmp_path):
    """The MNIST cells of config/experiments/pfedmt.yaml (PerMFL's MNIST reader in teams,
    pFedMe's CNN, pFedMT and pFedMe) run end to end on tiny files in MNIST's real IDX format."""
    from pathlib import Path

    import pandas as pd
    import yaml
    from test_loaders import MNIST_NAMES, write_mnist

    from fedbench.config.cells import Cell
    from fedbench.planning.validate import check_config
    from fedbench.run.partition_job import build_partition
    from fedbench.run.job import cell_job
    from fedbench.run.stages import run_cell

    write_mnist(tmp_path / "data" / "MNIST" / "raw", MNIST_NAMES, 400, 100, compress=True)
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/experiments/pfedmt.yaml").read_text())
    config.update(data_root=str(tmp_path / "data"), device="cpu")
    config["partitions"]["teams2x10"]["num_users"] = 10  # PerMFL's reader needs >= 10; 50 images per class: 20 each
    config["experiments"]["mnist_cnn"]["training"].update(rounds=2, batch_size=4)
    config["algorithms"]["pfedmt_cnn"].update(team_iterations=2, local_iterations=2)
    config["algorithms"]["pfedme_mnist_cnn"].update(local_steps=2, inner_steps=2)
    assert config["experiments"]["mnist_cnn"]["protocol"] == "pooled_max"
    check_config(config)
    build_partition(config, "mnist", "teams2x10", 0, tmp_path / "p.npz", tmp_path / "p.json")
    for algorithm in ("pfedmt_cnn", "pfedme_mnist_cnn"):
        metrics = run_cell(cell_job(config, Cell("mnist_cnn", "mnist", "teams2x10", "cnn", algorithm, 0)), tmp_path / "p.npz", tmp_path / algorithm)
        history = pd.read_csv(tmp_path / algorithm / "history.csv")
        assert list(history["round"]) == [1, 2] and history[["acc_pooled", "global_acc"]].notna().all().all()
        # pooled_max (pFedMe's average_data): the reported accuracy is the best round's pooled accuracy
        best = history.loc[history["acc_pooled"].idxmax()]
        assert metrics["num_clients"] == 10 and metrics["final"]["round"] == best["round"]
        assert metrics["final"]["accuracy"] == pytest.approx(best["acc_pooled"])


def test_pfedme_personal_model_theta_or_local_by_hand(problem):
    """K = 1, R = 1: theta = x - pl (x - c) (paper's PM) or w_{i,R} = x - eta lam pl (x - c) (the
    code's PM through aliasing); the global step is the same for both."""
    c, x0, sizes, _ = problem
    lam, pl, eta = 2.0, 0.1, 0.05
    states = {}
    for reading in ("theta", "local"):
        fed, initial, _ = quadratic_federation(sizes, c, x0, lr=eta)
        algo = ALGORITHMS["pfedme"](lam=lam, personal_lr=pl, inner_steps=1, local_steps=1, personal_model=reading)
        states[reading], _ = algo.round(fed, algo.init(fed, initial), 1)
    torch.testing.assert_close(states["theta"]["personal"]["p"], x0 - pl * (x0 - c))
    torch.testing.assert_close(states["local"]["personal"]["p"], x0 - eta * lam * pl * (x0 - c))
    torch.testing.assert_close(states["theta"]["global"]["p"], states["local"]["global"]["p"])
    with pytest.raises(ValueError, match="personal_model"):
        ALGORITHMS["pfedme"](personal_model="w")


def test_pfedme_mu_enters_the_personal_step_only(problem):
    """K = 1, R = 1 with mu: theta = x - pl ((x - c) + mu x) (the code's pFedMeOptimizer step)."""
    c, x0, sizes, _ = problem
    lam, pl, eta, mu = 2.0, 0.1, 0.05, 0.3
    fed, initial, _ = quadratic_federation(sizes, c, x0, lr=eta)
    algo = ALGORITHMS["pfedme"](lam=lam, personal_lr=pl, inner_steps=1, local_steps=1, mu=mu)
    state, _ = algo.round(fed, algo.init(fed, initial), 1)
    theta = x0 - pl * ((x0 - c) + mu * x0)
    torch.testing.assert_close(state["personal"]["p"], theta)
    torch.testing.assert_close(state["global"]["p"], ((torch.tensor(sizes, dtype=DT) / sum(sizes))[:, None] * (x0 - eta * lam * (x0 - theta))).sum(0))


def test_fedavg_step_without_configured_decay_is_plain_sgd():
    """One client with one training row, one step (the batch is that row): no weight decay
    configured -> w - lr grad CE exactly (no shrinkage); wd configured -> w - lr (grad + wd w)."""
    data = make_data([1], num_classes=3)
    lr = 0.5
    for wd in (0.0, 0.2):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
        start = {k: v.detach().clone() for k, v in model.named_parameters()}
        loss = nn.functional.cross_entropy(model(data.x[:1]), data.y[:1])
        grads = dict(zip(start, torch.autograd.grad(loss, list(model.parameters()))))
        fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=1, lr=lr, weight_decay=wd))
        algo = ALGORITHMS["fedavg"](local_steps=1)
        state, _ = algo.round(fed, algo.init(fed, model_weights(model)), 1)
        for name, w in start.items():
            torch.testing.assert_close(state["global"][name], w - lr * (grads[name] + wd * w))


def test_pfedmt_grid_scopes_mu_to_pfedme():
    """config/experiments/pfedmt.yaml: no experiment sets weight decay (FedAvg, Per-FedAvg and
    pFedMT step without it in the released code); every pFedMe entry carries mu = 0.001."""
    from pathlib import Path

    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/experiments/pfedmt.yaml").read_text())
    assert all(e["training"].get("weight_decay", 0.0) == 0.0 for e in config["experiments"].values())
    for name, entry in config["algorithms"].items():
        assert entry.get("mu", 0.0) == (0.001 if entry["method"] == "pfedme" else 0.0), name


# ---- on real data through the real minibatch oracle, replayed client by client with plain autograd ----

SIZES = [7, 3, 5]  # three clients; participation 2/3 samples two of them a round


def mlr_federation(*, lr, participation=2 / 3, seed=4, batch_size=3):
    data = make_data(SIZES, test=3)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=batch_size, lr=lr), participation=participation, seed=seed)
    return data, fed, model_weights(model)


def step(params, grads, lr):
    return {n: params[n] - lr * grads[n] for n in params}


def draw_rows(data, fed, split, steps, clients, generator):
    """Row indices [steps, C, B] of the minibatches the oracle draws (``MinibatchGradients.draw``,
    pinned in test_device_gradient.py) from ``generator``."""
    from fedbench.engine.device_gradient import MinibatchGradients

    return MinibatchGradients(fed.model, data, split, fed.local.batch_size).draw(steps, clients, generator).rows


def weighted(models, clients):
    """sum_{i in S} n_i theta_i / sum_{i in S} n_i."""
    n = torch.tensor([SIZES[i] for i in clients.tolist()], dtype=torch.float32)
    return {k: sum(p * m[k] for p, m in zip(n / n.sum(), models)) for k in models[0]}


def test_pfedme_rounds_by_hand_on_real_minibatches():
    """pFedMe (Dinh et al. 2020, Algorithm 1): every client draws one minibatch D per local round r and
    takes K steps theta <- theta - pl (grad f_i(theta; D) + lam (theta - w_i)) on it (Eq. 7; theta carries
    over between local rounds), then w_i <- w_i - eta lam (w_i - theta) (Eq. 8); the server samples S after
    the local work and sets w <- (1 - beta) w + beta sum_{i in S} n_i / n_S w_i (Eq. 9-10).  K = R = 2."""
    lam, pl, eta, beta, K, R = 2.0, 0.1, 0.2, 0.6, 2, 2
    data, fed, initial = mlr_federation(lr=eta)
    algo = ALGORITHMS["pfedme"](lam=lam, personal_lr=pl, inner_steps=K, local_steps=R, beta=beta)
    state = algo.init(fed, initial)
    for t in (1, 2):
        fed.begin_round(t)
        state, loss = algo.round(fed, state, t)

    streams = Streams(4)
    x = dict(initial)
    everyone = torch.arange(len(SIZES))
    for t in (1, 2):
        streams.begin(t)
        rows = draw_rows(data, fed, data.train, R, everyone, streams.clients("minibatches", everyone))
        w, theta = [dict(x) for _ in SIZES], [dict(x) for _ in SIZES]
        expected_loss = torch.zeros(len(SIZES))  # each client's mean minibatch loss over its K * R personal steps
        for i in everyone.tolist():
            for r in range(R):
                batch = rows[r, i]
                for _ in range(K):
                    grad, value = ce_gradient(fed.model, theta[i], data.x[batch], data.y[batch])
                    expected_loss[i] += value / (K * R)
                    theta[i] = {n: theta[i][n] - pl * (grad[n] + lam * (theta[i][n] - w[i][n])) for n in x}
                w[i] = {n: w[i][n] - eta * lam * (w[i][n] - theta[i][n]) for n in x}
        chosen = streams.sample(len(SIZES), 2)
        average = weighted([w[i] for i in chosen.tolist()], chosen)
        x = {n: (1 - beta) * x[n] + beta * average[n] for n in x}
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-4)
    for n in x:
        torch.testing.assert_close(state["global"][n], x[n], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(state["personal"][n], torch.stack([theta[i][n] for i in everyone]), atol=1e-5, rtol=1e-4)


def test_perfedavg_rounds_and_adaptation_by_hand_on_real_minibatches():
    """Per-FedAvg, first order (Fallah et al. 2020, Algorithm 1 with the FO approximation of Sec. 4): each
    sampled client runs R = 2 local rounds of temp = theta - alpha grad f(theta; D), theta <- theta - beta
    grad f(temp; D') on two fresh minibatches D, D'; the server averages (sample-weighted, serverperavg.py).
    Personalised model: "paper" one alpha-step from w on a training minibatch (Sec. 3); "code" an
    alpha-step then a beta-step on two test minibatches (userperavg.train_one_step), both in the
    evaluation-time stream of the round."""
    alpha, beta, R = 0.2, 0.3, 2
    data, fed, initial = mlr_federation(lr=alpha)
    algo = ALGORITHMS["perfedavg"](beta=beta, local_steps=R)
    state = algo.init(fed, initial)
    for t in (1, 2):
        fed.begin_round(t)
        state, loss = algo.round(fed, state, t)

    streams = Streams(4)
    x = dict(initial)
    for t in (1, 2):
        streams.begin(t)
        chosen = streams.sample(len(SIZES), 2)
        rows = draw_rows(data, fed, data.train, 2 * R, chosen, streams.clients("minibatches", chosen))
        models, expected_loss = [], torch.zeros(len(chosen))  # each sampled client's mean inner-step loss over R
        for c in range(len(chosen)):
            theta = dict(x)
            for r in range(R):
                d, d2 = rows[2 * r, c], rows[2 * r + 1, c]
                grad, value = ce_gradient(fed.model, theta, data.x[d], data.y[d])
                expected_loss[c] += value / R
                temp = step(theta, grad, alpha)
                theta = step(theta, ce_gradient(fed.model, temp, data.x[d2], data.y[d2])[0], beta)
            models.append(theta)
        x = weighted(models, chosen)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-4)
    for n in x:
        torch.testing.assert_close(state["global"][n], x[n], atol=1e-5, rtol=1e-4)

    everyone = torch.arange(len(SIZES))
    for adaptation, split, lrs in (("paper", data.train, (alpha,)), ("code", data.test, (alpha, beta))):
        rows = draw_rows(data, fed, split, len(lrs), everyone, client_streams(4, "finetune", (2,), everyone))
        personal = ALGORITHMS["perfedavg"](beta=beta, local_steps=R, adaptation=adaptation).client_models(fed, state, 2)
        for i in everyone.tolist():
            theta = dict(x)
            for s, lr in enumerate(lrs):
                theta = step(theta, ce_gradient(fed.model, theta, data.x[rows[s, i]], data.y[rows[s, i]])[0], lr)
            for n in x:
                torch.testing.assert_close(personal[n][i], theta[n], atol=1e-5, rtol=1e-4)


def test_fedavg_in_steps_rounds_by_hand_on_real_minibatches():
    """FedAvg counted in minibatch steps (the pFedMe code's useravg.py/serveravg.py; McMahan et al. 2017,
    Algorithm 1): each sampled client takes R = 3 plain SGD steps from w, one fresh minibatch each; the
    server takes the sample-weighted average."""
    lr, R = 0.3, 3
    data, fed, initial = mlr_federation(lr=lr)
    algo = ALGORITHMS["fedavg"](local_steps=R)
    state = algo.init(fed, initial)
    for t in (1, 2):
        fed.begin_round(t)
        state, _ = algo.round(fed, state, t)

    streams = Streams(4)
    x = dict(initial)
    for t in (1, 2):
        streams.begin(t)
        chosen = streams.sample(len(SIZES), 2)
        rows = draw_rows(data, fed, data.train, R, chosen, streams.clients("minibatches", chosen))
        models = []
        for c in range(len(chosen)):
            theta = dict(x)
            for s in range(R):
                theta = step(theta, ce_gradient(fed.model, theta, data.x[rows[s, c]], data.y[rows[s, c]])[0], lr)
            models.append(theta)
        x = weighted(models, chosen)
    for n in x:
        torch.testing.assert_close(state["global"][n], x[n], atol=1e-5, rtol=1e-4)


def running_statistics_by_hand(batches: list[torch.Tensor], mean: torch.Tensor, var: torch.Tensor, momentum=0.1):
    """``nn.BatchNorm1d``'s running statistics after forwards on ``batches`` in turn (PyTorch's rule:
    r <- (1 - m) r + m s, with the batch mean and the unbiased batch variance)."""
    for x in batches:
        mean = (1 - momentum) * mean + momentum * x.mean(0)
        var = (1 - momentum) * var + momentum * x.var(0, unbiased=True)
    return mean, var


@pytest.mark.parametrize("method", ["pfedme", "perfedavg", "fedavg", "pfedmt"])
def test_batchnorm_running_statistics_follow_each_clients_forwards_and_the_server_average(method):
    """A BatchNorm model in the Moreau family (FeMAM's grid runs pFedMe on ResNet-9): each client's
    running statistics move once per forward on its own minibatches -- pFedMe's K personal steps per
    local round (Alg. 1), Per-FedAvg's two forwards per local round, FedAvg's one per step, pFedMT's
    one per local iteration of every team iteration -- starting from the global model's; its
    personalised model keeps them and the server mixes them like every weight (pFedMe Eq. 10 with
    beta; the sample-weighted mean; pFedMT's tau_i delta_j, here n_j / n).  The BatchNorm comes
    first, so its statistics are those of the raw minibatches, replayed here by hand over 2 rounds."""
    K, R, beta = 2, 2, 0.6
    data = make_data(SIZES, test=3)
    torch.manual_seed(4)
    model = nn.Sequential(nn.BatchNorm1d(5), nn.Linear(5, 3))
    fed = make_federation(data, model, LocalSGD(epochs=1, batch_size=3, lr=0.1), participation=2 / 3, seed=4)
    algo = {"pfedme": lambda: ALGORITHMS["pfedme"](lam=2.0, personal_lr=0.1, inner_steps=K, local_steps=R, beta=beta),
            "perfedavg": lambda: ALGORITHMS["perfedavg"](beta=0.1, local_steps=R),
            "fedavg": lambda: ALGORITHMS["fedavg"](local_steps=R),
            "pfedmt": lambda: ALGORITHMS["pfedmt"](team_iterations=K, local_iterations=R)}[method]()
    state = algo.init(fed, model_weights(model))
    for t in (1, 2):
        fed.begin_round(t)
        state, _ = algo.round(fed, state, t)

    streams = Streams(4)
    everyone = torch.arange(len(SIZES))
    mean, var, count = torch.zeros(5), torch.ones(5), 0
    for t in (1, 2):
        streams.begin(t)
        if method == "pfedme":  # every client trains; the server samples after the local work
            rows = draw_rows(data, fed, data.train, R, everyone, streams.clients("minibatches", everyone))
            clients, forwards = everyone, [rows[r] for r in range(R) for _ in range(K)]
            chosen = streams.sample(len(SIZES), 2)
        elif method == "pfedmt":  # every device, one fresh draw per team iteration
            rows = [draw_rows(data, fed, data.train, R, everyone, streams.clients("minibatches", everyone)) for _ in range(K)]
            clients, forwards = everyone, [r[l] for r in rows for l in range(R)]
            chosen = everyone
        else:
            clients = chosen = streams.sample(len(SIZES), 2)
            rows = draw_rows(data, fed, data.train, (2 if method == "perfedavg" else 1) * R, chosen, streams.clients("minibatches", chosen))
            forwards = list(rows)
        own = [running_statistics_by_hand([data.x[f[c]] for f in forwards], mean, var) for c in range(len(clients))]
        count += len(forwards)
        n = torch.tensor([SIZES[i] for i in chosen.tolist()], dtype=torch.float32)
        at = [clients.tolist().index(i) for i in chosen.tolist()]
        average = [sum(w * own[c][s] for w, c in zip(n / n.sum(), at)) for s in (0, 1)]
        mixing = beta if method == "pfedme" else 1.0
        mean, var = [(1 - mixing) * old + mixing * new for old, new in zip((mean, var), average)]
    global_ = algo.global_model(fed, state)
    torch.testing.assert_close(global_["0.running_mean"], mean, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(global_["0.running_var"], var, atol=1e-5, rtol=1e-4)
    assert int(global_["0.num_batches_tracked"]) == count
    if method in ("pfedme", "pfedmt"):  # the personalised models keep the clients' own statistics of the last round
        personal = algo.client_models(fed, state, 2)
        torch.testing.assert_close(personal["0.running_mean"], torch.stack([m for m, _ in own]), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(personal["0.running_var"], torch.stack([v for _, v in own]), atol=1e-5, rtol=1e-4)
    if method == "perfedavg":  # the adapted copies: one forward on a training minibatch from the global model
        rows = draw_rows(data, fed, data.train, 1, everyone, client_streams(4, "finetune", (2,), everyone))
        adapted = algo.client_models(fed, state, 2)
        for i in everyone.tolist():
            m, v = running_statistics_by_hand([data.x[rows[0, i]]], mean, var)
            torch.testing.assert_close(adapted["0.running_mean"][i], m, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(adapted["0.running_var"][i], v, atol=1e-5, rtol=1e-4)

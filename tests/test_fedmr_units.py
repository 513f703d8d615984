"""Unit-level facts of the FedMR module group (FedMR, FedIndep, FedMut, FedExP, FedASAM, CluSamp,
FedGen, the ASAM and custom local steps) that the round-level tests in ``test_fedmr.py`` and
``test_fedmr_rounds.py`` leave open: every dissimilarity kind, Algorithm 2's merge-and-fill rule
branch by branch, the scored models, the states ``init`` builds, FedGen's decayed client loss and
its generator's inputs.  Expected values are derived by hand (the arithmetic is in the docstrings)
or recomputed by brute force (numpy/scipy loops, plain autograd)."""

import copy
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.cluster.hierarchy import ClusterWarning, linkage
from scipy.spatial.distance import squareform
from torch import nn
from torch.func import functional_call

from conftest import Streams, make_data, make_federation
from fedbench.engine.streams import stream
from test_fedmr import bn_model
from test_fedmr_rounds import (FEDMR_DATA, FEDMR_HP, conflicting_clients, label_counts, mlp, replay_fedmr,
                               run_against_replay, sample_and_train)
from fedbench.registry.algorithms import PlanContext
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.clusamp import CluSamp, dissimilarity, sampling_distributions
from fedbench.algorithms.fedexp import fedexp_step_size
from fedbench.algorithms.fedgen import Generator, diversity_loss, generator_loss, head_names
from fedbench.algorithms.fedmr import sample_distinct, uniform_average
from fedbench.algorithms.fedmut import mutate
from fedbench.algorithms.recombination import recombination_units, recombine, segment_of_units
from fedbench.engine.custom_step import masked_cross_entropy
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import broadcast, model_weights
from fedbench.models import build_model

HP = LocalSGD(epochs=1, batch_size=4, lr=0.2)


def copy_of(generator: torch.Generator) -> torch.Generator:
    g = torch.Generator()
    g.set_state(generator.get_state())
    return g


# ---- CluSamp: dissimilarity ---------------------------------------------------------------


def gradient_matrix() -> torch.Tensor:
    """8 representative gradients of 7 entries (K != P): a, 3a (parallel), -2a (opposite), two zero
    rows (never-sampled clients), two random rows and one short row (norm < 1)."""
    gen = torch.Generator().manual_seed(2)  # a seed whose parallel/opposite cosines round past +1 and -1
    a = torch.randn(7, generator=gen, dtype=torch.float64)
    rest = torch.randn(2, 7, generator=gen, dtype=torch.float64)
    short = 0.05 * torch.randn(7, generator=gen, dtype=torch.float64)
    return torch.stack([a, 3 * a, -2 * a, torch.zeros(7), torch.zeros(7), rest[0], rest[1], short])


def brute_force_dissimilarity(g: np.ndarray, kind: str) -> np.ndarray:
    k = len(g)
    d = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            if kind == "L1":
                d[i, j] = np.abs(g[i] - g[j]).sum()
            elif kind == "L2":
                d[i, j] = math.sqrt(((g[i] - g[j]) ** 2).sum())
            else:
                ni, nj = np.linalg.norm(g[i]), np.linalg.norm(g[j])
                if ni == 0 and nj == 0:
                    d[i, j] = 0.0  # two never-sampled clients have the same (zero) gradient
                elif ni == 0 or nj == 0:
                    d[i, j] = math.pi / 2  # the zero vector is orthogonal to every direction
                else:
                    d[i, j] = math.acos(min(1.0, max(-1.0, float(g[i] @ g[j]) / (ni * nj))))
    return d


@pytest.mark.parametrize("kind", ["L1", "L2", "arccos"])
def test_dissimilarity_matches_a_brute_force_loop(kind):
    """CluSamp module docstring / Fraboni et al. (ICML'21) Sec. 5: D_ij = ||G_i - G_j||_1 (``L1``, the
    code's default), ||G_i - G_j||_2 (``L2``) or the angle arccos(G_i.G_j / (|G_i||G_j|)) (``arccos``),
    zero on the diagonal; recomputed pair by pair with numpy.  For arccos the parallel pair (a, 3a)
    is at angle 0, the opposite pair (a, -2a) at pi (cosines rounded past +-1 are clipped), two zero
    gradients at 0 and a zero gradient at pi/2 from any other."""
    g = gradient_matrix()
    got = dissimilarity(g, kind)
    assert isinstance(got, np.ndarray) and got.shape == (8, 8) and got.dtype == np.float64
    want = brute_force_dissimilarity(g.numpy(), kind)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-7 if kind == "arccos" else 1e-12)
    assert (np.diag(got) == 0).all()
    if kind == "arccos":
        assert got[0, 1] == pytest.approx(0.0, abs=1e-7) and got[0, 2] == pytest.approx(math.pi, abs=1e-7)
        assert got[3, 4] == 0.0 and got[3, 0] == pytest.approx(math.pi / 2) and got[5, 4] == pytest.approx(math.pi / 2)
    # float32 gradients are compared in float64 (the engine's gradients are float32)
    np.testing.assert_allclose(dissimilarity(g.float(), kind), brute_force_dissimilarity(g.float().double().numpy(), kind),
                               rtol=1e-10, atol=1e-6 if kind == "arccos" else 1e-12)


def test_dissimilarity_rejects_an_unknown_kind():
    """Only L1, L2 and arccos exist (module docstring); the check is case-sensitive."""
    for kind in ("cosine", "l1", "L3"):
        with pytest.raises(ValueError, match="similarity must be L1, L2 or arccos"):
            dissimilarity(gradient_matrix(), kind)


# ---- CluSamp: Algorithm 2's sampling distributions -----------------------------------------


def tree(*merges) -> np.ndarray:
    """A scipy-style linkage matrix from (a, b) merges (the distance and size columns are unused)."""
    return np.array([[a, b, float(i + 1), 2.0] for i, (a, b) in enumerate(merges)])


def test_sampling_distributions_blocked_merges_propagate_and_later_merges_go_on():
    """Fraboni et al. Algorithm 2 (module docstring): merge two groups while their joint weight m p
    stays <= 1, then fill m distributions heaviest group first.
    K = 5, m = 2, n = (4, 2, 3, 1, 2), m p = n / 6 = (4, 2, 3, 1, 2) / 6.  Merges in tree order:
      (0, 2) -> node 5: 7/6 > 1, blocked;
      (1, 3) -> node 6: 3/6 <= 1, merged (a merge after a blocked one still happens);
      (4, 5) -> node 7: node 5 is blocked, so 7 is blocked (a blocked node as second child);
      (7, 6) -> node 8: node 7 is blocked (as first child).
    Groups {0} 4/6, {1, 3} 3/6, {2} 3/6, {4} 2/6; by weight, ties by smallest client: 0, {1,3}, 2, 4.
    Filling rows of mass 1: row 0 = client 0 (4/6) + client 1 (2/6) = 1; row 1 = client 3 (1/6) +
    client 2 (3/6) + client 4 (2/6) = 1."""
    r = sampling_distributions(tree((0, 2), (1, 3), (4, 5), (7, 6)), np.array([4.0, 2, 3, 1, 2]), 2)
    np.testing.assert_allclose(r, np.array([[4, 2, 0, 0, 0], [0, 0, 3, 1, 2]]) / 6, atol=1e-12)


def test_sampling_distributions_joint_weight_exactly_one_merges_and_ties_order_by_smallest_client():
    """Algorithm 2's merge condition is "joint weight <= 1": K = 4, m = 2, equal sizes, m p_i = 1/2.
    (0, 3) -> 1/2 + 1/2 = 1 exactly: merged; (1, 2) -> 1: merged; (4, 5) -> 2: blocked.
    Both groups weigh 1; the tie goes to the group with the smaller client ({0, 3}), so
    r_0 = (1/2, 0, 0, 1/2) and r_1 = (0, 1/2, 1/2, 0) (not clients 0, 1 then 2, 3, as unmerged)."""
    r = sampling_distributions(tree((0, 3), (1, 2), (4, 5)), np.ones(4), 2)
    np.testing.assert_allclose(r, [[0.5, 0, 0, 0.5], [0, 0.5, 0.5, 0]], atol=1e-12)


def test_sampling_distributions_float_tolerance_of_the_merge_test():
    """The merge test allows float noise of 1e-12 above 1 (module: merge when the joint weight
    "stays <= 1", coded as ``> 1 + 1e-12`` blocks).  n = (0.5, 0.5 + 1e-12, 1 - 1e-12) sums to 2, so
    with m = 2 the weights are n itself and clients 0, 1 weigh 1 + 1e-12 together (exactly, in
    floats): still merged, and the group {0, 1} (the heavier) fills r_0 = (1/2, 1/2, 0).  With
    n_1 = 0.5 + 1e-9 the pair weighs 1 + 1e-9 > 1 + 1e-12: blocked, so the heaviest single client 2
    (1 - 1e-9) comes first and r_0 is client 2 topped up with 1e-9 of client 1."""
    n = np.array([0.5, 0.5 + 1e-12, 0.0])
    n[2] = 2.0 - n[0] - n[1]
    assert n.sum() == 2.0 and n[0] + n[1] == 1.0 + 1e-12  # the boundary, exactly
    r = sampling_distributions(tree((0, 1), (3, 2)), n, 2)
    np.testing.assert_allclose(r, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], atol=1e-11)
    n = np.array([0.5, 0.5 + 1e-9, 0.0])
    n[2] = 2.0 - n[0] - n[1]
    r = sampling_distributions(tree((0, 1), (3, 2)), n, 2)
    np.testing.assert_allclose(r, [[0.0, 1e-9, 1 - 1e-9], [0.5, 0.5, 0.0]], atol=1e-11)


def test_sampling_distributions_spill_a_heavy_client_over_several_distributions():
    """A client heavier than one distribution spills into the next (module docstring).
    K = 4, m = 3, n = (5, 3, 2, 2): m p = n / 4 = (1.25, 0.75, 0.5, 0.5).
    (2, 3) -> 1: merged; (1, 4) -> 1.75: blocked; (0, 5): blocked.  Order: {0} 1.25, {2,3} 1, {1} 0.75.
    r_0 = client 0's first 1;  r_1 = client 0's last 0.25 + client 2's 0.5 + client 3's first 0.25;
    r_2 = client 3's last 0.25 + client 1's 0.75.  Columns sum to m p_i, rows to 1."""
    r = sampling_distributions(tree((2, 3), (1, 4), (0, 5)), np.array([5.0, 3, 2, 2]), 3)
    np.testing.assert_allclose(r, [[1, 0, 0, 0], [0.25, 0, 0.5, 0.25], [0, 0.75, 0, 0.25]], atol=1e-12)


def test_sampling_distributions_drop_float_leftover_past_the_last_distribution():
    """Algorithm 2's fill with float weights (module docstring: every distribution sums to one).
    A distribution is full once its room is <= 1e-12, so the m rows may close with up to 1e-12 of
    unused room each, and the last client can still hold more than 1e-12 when all m are full: that
    float remainder is dropped, not put into a distribution m + 1.  K = 4, m = 3, weights (summing
    to 3, so m p = n) 1 - 6e-13, 1 - 6e-13, 0.6 and 0.4 + 1.2e-12; every merge is blocked ((2, 3)
    weighs 1 + 1.2e-12 > 1 + 1e-12).  Row 0 = client 0 (room 6e-13 left: full), row 1 = client 1,
    row 2 = client 2's 0.6 + client 3's 0.4, and client 3's last 1.2e-12 finds no row.  Each row,
    normalised, sums to 1 to the last bit (client 0's row is exactly (1, 0, 0, 0))."""
    n = np.array([1 - 6e-13, 1 - 6e-13, 0.6, 0.0])
    n[3] = 3.0 - n[0] - n[1] - n[2]
    assert n.sum() == 3.0 and n[3] - 0.4 > 1.1e-12 and 1.0 - n[0] < 1e-12
    r = sampling_distributions(tree((0, 1), (2, 3), (4, 5)), n, 3)
    np.testing.assert_allclose(r, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0.6, 0.4]], atol=1e-11)
    np.testing.assert_allclose(r.sum(1), np.ones(3), rtol=0, atol=4e-16)
    assert r[0, 0] == 1.0 and r[1, 1] == 1.0


def test_clusamp_condensed_arccos_distances_are_read_from_the_upper_triangle():
    """CluSamp with ``similarity: arccos`` and ``linkage_input: distances`` (module docstring): D is
    passed to Ward as condensed distances, i.e. its upper triangle.  arccos(G_i.G_j) and
    arccos(G_j.G_i) come out of the Gram matrix product, which may round the two triangles
    differently in the last bits (it does for some of these shapes with this machine's BLAS): such a
    matrix must be read, not refused as asymmetric.  Three pairs of nearly parallel gradients
    {0, 3}, {1, 4}, {2, 5} (angle ~1e-3 inside a pair, ~1 between pairs), equal sizes, m = 3:
    m p_i = 1/2, each pair merges to weight 1, every later merge is blocked; the three groups tie
    at 1 and go by smallest client: r_0 = (1/2, 0, 0, 1/2, 0, 0), r_1 = (0, 1/2, 0, 0, 1/2, 0),
    r_2 = (0, 0, 1/2, 0, 0, 1/2)."""
    fed = clusamp_fed([4] * 6, 0.5)
    algorithm = ALGORITHMS["clusamp"](similarity="arccos", linkage_input="distances")
    want = np.zeros((3, 6))
    for j in range(3):
        want[j, [j, j + 3]] = 0.5
    for width in (5, 7, 10, 30, 64):
        for seed in (0, 1):
            gen = torch.Generator().manual_seed(seed)
            directions = torch.randn(3, width, generator=gen)
            gradients = directions.repeat(2, 1) + 1e-3 * torch.randn(6, width, generator=gen)
            np.testing.assert_allclose(algorithm.distributions(fed, {"gradients": gradients}), want, atol=1e-12)


# ---- CluSamp: the algorithm object -------------------------------------------------------------


def clusamp_fed(sizes, participation):
    return make_federation(make_data(sizes), nn.Sequential(nn.Flatten(), nn.Linear(5, 3)), HP, participation, seed=0)


def merges(linkage_matrix) -> list[tuple[int, int]]:
    return [tuple(sorted(map(int, row[:2]))) for row in linkage_matrix]


def test_clusamp_distributions_use_ward_on_the_rows_or_on_the_condensed_matrix():
    """CluSamp module docstring (notes §2.6: ``linkage(sim_matrix, 'ward')``): Ward linkage of the rows
    of D (``rows``, the code) or of D as condensed distances (``distances``), then Algorithm 2 with
    m = round(0.5 * 4) = 2 and the clients' sample counts.

    G = ((2,3), (1,8), (5,2), (6,0)), n = (2, 3, 3, 3): m p = (4, 6, 6, 6) / 11.  scipy's Ward on the
    rows merges (2,3), then (0, {2,3}), then 1: (2,3) weighs 12/11 > 1 so every merge is blocked;
    order 1, 2, 3, 0 gives r_0 = (0, 6, 5, 0)/11, r_1 = (4, 0, 1, 6)/11.  On the condensed matrix
    it merges (2,3) (blocked), (0,1) (10/11: merged), then both: order {0,1}, 2, 3 gives
    r_0 = (4, 6, 1, 0)/11, r_1 = (0, 0, 5, 6)/11.

    G = ((9,5), (3,6), (8,1), (4,1)), n = (3, 2, 3, 2): m p = (.6, .4, .6, .4).  Ward on the rows
    merges (2,3) (weight 1: merged) and (0,1) (merged): tie, {0,1} first: r = ((.6,.4,0,0), (0,0,.6,.4)).
    Single linkage would merge (2,3) then (0, {2,3}) (blocked): order {2,3}, 0, 1, the rows swapped."""
    g_a = torch.tensor([[2.0, 3], [1, 8], [5, 2], [6, 0]])
    d = dissimilarity(g_a, "L1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClusterWarning)
        assert merges(linkage(d, "ward")) == [(2, 3), (0, 4), (1, 5)]
    assert merges(linkage(squareform(d), "ward")) == [(2, 3), (0, 1), (4, 5)]
    fed = clusamp_fed([2, 3, 3, 3], 0.5)
    state = {"gradients": g_a}
    np.testing.assert_allclose(CluSamp().distributions(fed, state), np.array([[0, 6, 5, 0], [4, 0, 1, 6]]) / 11, atol=1e-12)
    np.testing.assert_allclose(ALGORITHMS["clusamp"](linkage_input="distances").distributions(fed, state),
                               np.array([[4, 6, 1, 0], [0, 0, 5, 6]]) / 11, atol=1e-12)

    g_b = torch.tensor([[9.0, 5], [3, 6], [8, 1], [4, 1]])
    d = dissimilarity(g_b, "L1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClusterWarning)
        assert merges(linkage(d, "ward")) == [(2, 3), (0, 1), (4, 5)]
        assert merges(linkage(d, "single")) == [(2, 3), (0, 4), (1, 5)]
    fed = clusamp_fed([3, 2, 3, 2], 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the square matrix passed as observations is on purpose: no warning escapes
        r = CluSamp().distributions(fed, {"gradients": g_b})
    np.testing.assert_allclose(r, [[0.6, 0.4, 0, 0], [0, 0, 0.6, 0.4]], atol=1e-12)


def test_clusamp_samples_at_least_one_distribution():
    """m = max(1, round(rho K)) (``Federation.sample_clients``' rule): rho = 0.1, K = 4 gives
    round(0.4) = 0 -> one distribution, which holds every client with weight p_i = n_i / n."""
    fed = clusamp_fed([2, 3, 3, 4], 0.1)
    r = CluSamp().distributions(fed, {"gradients": torch.tensor([[0.0], [1], [5], [6]])})
    np.testing.assert_allclose(r, [[2 / 12, 3 / 12, 3 / 12, 4 / 12]], atol=1e-12)


def test_clusamp_init_and_scored_models():
    """CluSamp module docstring: every client's representative gradient starts at zero, one entry per
    model *parameter* (BatchNorm running statistics are not gradients); the scored model of every
    client is the global model."""
    model = bn_model()
    fed = make_federation(make_data([6, 6, 6]), model, HP, 1.0)
    initial = model_weights(model)
    algorithm = ALGORITHMS["clusamp"]()
    state = algorithm.init(fed, initial)
    size = sum(p.numel() for p in model.parameters())  # 5*6+6 + 2*6 + 6*4+4 + 2*4 + 4*3+3 = 99
    assert size == 99
    assert state["gradients"].shape == (3, 99) and not state["gradients"].any()
    assert state["global"] is initial
    scored = {k: v + 1 if v.is_floating_point() else v for k, v in initial.items()}
    check_scored_everywhere(algorithm, fed, {**state, "global": scored}, scored)


# ---- scored models of the methods that keep one global model -----------------------------


def check_scored_everywhere(algorithm, fed, state, scored):
    clients = algorithm.client_models(fed, state, 1)
    assert clients.keys() == scored.keys()
    for k, v in scored.items():
        assert clients[k].shape == (fed.num_clients, *v.shape)
        for c in range(fed.num_clients):
            torch.testing.assert_close(clients[k][c], v)
    got = algorithm.global_model(fed, state)
    assert got.keys() == scored.keys()
    for k, v in scored.items():
        torch.testing.assert_close(got[k], v)


@pytest.mark.parametrize("name", ["fedmr", "fedindep", "fedmut", "fedgen"])
def test_intermediate_models_are_never_scored(name):
    """FedMR Alg. 1 line 11 / Sec. 5.2 ("IndepAggr"), FedMut and FedGen (notes §2.7): every client is
    scored on the global model (FedMR, FedIndep, FedMut: the uniform mean of the m trained models),
    never on the m intermediate (recombined / mutated) models the server keeps for the next round."""
    model = bn_model()
    fed = make_federation(make_data([6, 6, 6, 6]), model, HP, 0.5)
    w = model_weights(model)
    scored = {k: v + 0.5 if v.is_floating_point() else v + 3 for k, v in w.items()}
    intermediate = {k: torch.stack([v - 1, v + 2]) for k, v in w.items()}
    state = {"global": scored, "models": intermediate}
    check_scored_everywhere(ALGORITHMS[name](), fed, state, scored)


def test_fedasam_scores_its_sample_weighted_global_model():
    """FedASAM module docstring: a FedAvg server (one global model, scored for every client)."""
    model = mlp()
    fed = make_federation(make_data([6, 6, 6]), model, HP, 1.0)
    algorithm = ALGORITHMS["fedasam"]()
    initial = model_weights(model)
    state = algorithm.init(fed, initial)
    assert state.keys() == {"global"} and state["global"] is initial
    check_scored_everywhere(algorithm, fed, state, initial)


# ---- FedExP -----------------------------------------------------------------------------------


def test_fedexp_step_size_against_numpy():
    """FedExP Eq. (8) as the code runs it (notes §2.6): p_i = n_i / sum_S n; Delta_bar = sum p_i Delta_i
    (every entry, buffers included); A = sum p_i ||Delta_i||^2 and ||Delta_bar||^2 over the ``names``
    entries only (a matrix, a vector; the buffer is left out); eta = max(1, A / (2 (||Delta_bar||^2 + eps m)))
    with m the number of clients.  Mixed updates with eps = 0.37 extrapolate (eta > 1); identical
    updates D give A = ||D||^2 = ||Delta_bar||^2 and eta = max(1, A / (2 (A + eps m))) = 1."""
    gen = torch.Generator().manual_seed(5)
    deltas = {"w": torch.randn(3, 2, 3, generator=gen), "b": torch.randn(3, 4, generator=gen),
              "running": 10 * torch.randn(3, 3, generator=gen)}
    for k in ("w", "b"):  # client 2 (weight 5) nearly cancels clients 0 and 1: Delta_bar is small
        deltas[k][2] = -(deltas[k][0] + 2 * deltas[k][1]) / 5 + 0.2 * deltas[k][2]
    counts = torch.tensor([1.0, 2.0, 5.0])
    p = counts.double().numpy() / 8
    flat = {k: v.double().numpy().reshape(3, -1) for k, v in deltas.items()}
    for epsilon in (0.37, 0.01):
        eta, mean = fedexp_step_size(deltas, counts, ["w", "b"], epsilon)
        for k, v in flat.items():
            np.testing.assert_allclose(mean[k].double().numpy().ravel(), (p[:, None] * v).sum(0), rtol=1e-6)
        both = np.concatenate([flat["w"], flat["b"]], 1)
        spread = (p * (both**2).sum(1)).sum()
        d_bar = (p[:, None] * both).sum(0)
        want = max(1.0, 0.5 * spread / ((d_bar**2).sum() + epsilon * 3))
        assert want > 1.05
        assert eta == pytest.approx(want, rel=1e-6)
    same = {"w": torch.ones(2, 2, 3), "b": torch.full((2, 4), -2.0)}  # ||D||^2 = 6 + 16 = 22
    eta, _ = fedexp_step_size(same, torch.tensor([3.0, 1.0]), ["w", "b"], 0.1)
    assert 0.5 * 22 / (22 + 0.2) < 1 and eta == 1.0


def exact_step_size(deltas: np.ndarray, weights, epsilon: float) -> Fraction:
    """FedExP Eq. (8) in exact rational arithmetic on the exact values of float inputs:
    p_i = n_i / sum n, A = sum p_i ||Delta_i||^2, Delta_bar = sum p_i Delta_i,
    eta = max(1, A / (2 (||Delta_bar||^2 + epsilon m)))."""
    n = [Fraction(float(w)) for w in weights]
    p = [w / sum(n) for w in n]
    rows = [[Fraction(float(x)) for x in row] for row in deltas]
    spread = sum(pi * sum(x * x for x in row) for pi, row in zip(p, rows))
    mean = [sum(pi * row[j] for pi, row in zip(p, rows)) for j in range(len(rows[0]))]
    return max(Fraction(1), spread / (2 * (sum(x * x for x in mean) + Fraction(epsilon) * len(n))))


def test_fedexp_step_size_is_exact_in_double_precision_whatever_the_input_dtypes():
    """FedExP's step size (Eq. (8)) is evaluated in float64 whatever the dtype of the updates and the
    weights, so it agrees with exact rational arithmetic on the inputs' values to ~1e-16.
    Float32 updates (the engine's dtype) Delta = mu -+ D, mu = (1 + 2^-12)/2 (1, -1, 2),
    D = (3 (1 + 2^-11), -2 (1 + 2^-10), 1.5 + 2^-9), equal counts: mu is a float32 number but
    neither its squares nor those of the updates are, so float32 norms would be off by ~1e-8.
    Float32 weights 0.1, 0.2, 0.3 with float64 updates: p_i = n_i / sum n are not float32 numbers
    and the float32 sum of the weights is rounded."""
    mu = np.float32(0.5 * (1 + 2**-12)) * np.array([1, -1, 2], dtype=np.float32)
    d = np.array([3 * (1 + 2**-11), -2 * (1 + 2**-10), 1.5 + 2**-9], dtype=np.float32)
    updates = np.stack([mu - d, mu + d])
    assert updates.dtype == np.float32 and ((updates[0] + updates[1]) / 2 == mu).all()
    assert (updates.astype(np.float64) ** 2 != (updates * updates).astype(np.float64)).any()
    assert (mu.astype(np.float64) ** 2 != (mu * mu).astype(np.float64)).all()
    eta, mean = fedexp_step_size({"w": torch.from_numpy(updates)}, torch.tensor([7, 7]), ["w"], 1e-3)
    want = exact_step_size(updates, [7, 7], 1e-3)
    assert want > 5
    assert eta == pytest.approx(float(want), rel=1e-13)
    np.testing.assert_array_equal(mean["w"].numpy(), mu)

    weights = torch.tensor([0.1, 0.2, 0.3])
    updates = torch.tensor([[1.0, -2.0, 0.5], [-0.5, 1.5, -1.0], [0.25, -0.25, 2.0]], dtype=torch.float64)
    eta, _ = fedexp_step_size({"w": updates}, weights, ["w"], 0.01)
    want = exact_step_size(updates.numpy(), weights.numpy(), 0.01)
    assert want > 3
    assert eta == pytest.approx(float(want), rel=1e-13)


def test_fedexp_init_scores_the_initial_model():
    """FedExP starts from w_0 with no previous iterate: (w_0 + w_0) / 2 = w_0 is scored; eta = 1."""
    model = bn_model()
    fed = make_federation(make_data([6, 6, 6]), model, HP, 1.0)
    algorithm = ALGORITHMS["fedexp"]()
    initial = model_weights(model)
    state = algorithm.init(fed, initial)
    assert state["eta"] == 1.0 and state["global"] is initial and state["previous"] is initial
    check_scored_everywhere(algorithm, fed, state, initial)


def test_fedexp_scores_the_mean_of_the_last_two_iterates_or_the_last():
    """FedExP module docstring / notes §2.7: the scored model is (w_t + w_{t+1}) / 2 (``last_two``,
    the code) for floating entries; an integer buffer (BatchNorm's batch count) keeps w_{t+1}'s value
    and dtype; ``scored: last`` scores w_{t+1} itself.  w_t = (1, 3), w_{t+1} = (3, 9): mean (2, 6)."""
    fed = make_federation(make_data([6, 6]), mlp(), HP, 1.0)
    g = {"w": torch.tensor([3.0, 9.0]), "n": torch.tensor(7)}
    p = {"w": torch.tensor([1.0, 3.0]), "n": torch.tensor(4)}
    state = {"global": g, "previous": p, "eta": 2.0}
    check_scored_everywhere(ALGORITHMS["fedexp"](), fed, state, {"w": torch.tensor([2.0, 6.0]), "n": torch.tensor(7)})
    assert ALGORITHMS["fedexp"]().global_model(fed, state)["n"].dtype == torch.int64
    check_scored_everywhere(ALGORITHMS["fedexp"](scored="last"), fed, state, g)


def test_fedexp_round_extrapolates_batchnorm_statistics_with_the_parameters_step():
    """FedExP (notes §2.6): eta_g from the *parameters'* updates only, then w <- w + eta_g Delta_bar on
    the whole state dict: the BatchNorm running statistics move by eta_g times their mean update too;
    the integer batch counter takes the clients' maximum (3 clients of 12, 8, 10 samples, batch 4,
    2 epochs: 6, 4 and 6 steps -> 6).  eps = 0.05 (not the default) times m = 3 clients."""
    data = conflicting_clients([12, 8, 10])
    hp = LocalSGD(epochs=2, batch_size=4, lr=0.5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    fed = make_federation(data, model, hp, 1.0, seed=7)
    replay = make_federation(data, model, hp, 1.0, seed=7)
    algorithm = ALGORITHMS["fedexp"](epsilon=0.05)
    state = algorithm.init(fed, model_weights(model))
    w = state["global"]
    chosen = replay.sample_clients()
    trained, _ = replay.train_clients(broadcast(w, 3), chosen)  # the local work; the server step by hand below
    state, _ = algorithm.round(fed, state, 1)

    p = data.train.counts[chosen].double().numpy() / 30
    names = [n for n, _ in model.named_parameters()]
    delta = {k: trained[k].double().numpy().reshape(3, -1) - w[k].double().numpy().reshape(1, -1)
             for k in w if w[k].is_floating_point()}
    d_bar = {k: (p[:, None] * v).sum(0) for k, v in delta.items()}
    spread = sum((p * (delta[n] ** 2).sum(1)).sum() for n in names)
    eta = max(1.0, 0.5 * spread / (sum((d_bar[n] ** 2).sum() for n in names) + 0.05 * 3))
    assert eta > 1.02  # extrapolation, not averaging
    assert state["eta"] == pytest.approx(eta, rel=1e-5)
    for k, v in d_bar.items():
        np.testing.assert_allclose(state["global"][k].double().numpy().ravel(), w[k].double().numpy().ravel() + eta * v,
                                   rtol=1e-4, atol=1e-5, err_msg=k)
    assert float(np.abs(d_bar["2.running_mean"]).max()) > 1e-3  # the statistics did move
    assert int(state["global"]["2.num_batches_tracked"]) == 6
    assert state["previous"] is w


# ---- FedMR, FedIndep -----------------------------------------------------------------------------


def test_fedmr_keeps_m_models_however_many_clients_participate():
    """FedMR ``models``: m intermediate models; each round m distinct clients are drawn uniformly (in
    increasing order) from the federation's stream, whatever the participation (here 1.0 of 5
    clients, m = 2), and train them (Alg. 1 lines 3-7), then per-layer recombination."""
    data, m = make_data(FEDMR_DATA), 2
    model = mlp()
    fed = make_federation(data, model, FEDMR_HP, participation=1.0, seed=1)
    expected = replay_fedmr(data, model, FEDMR_HP, seed=1, rounds=2, m=m, first_stage=0, per_layer=True)
    run_against_replay(ALGORITHMS["fedmr"](models=m), fed, expected, m)


def test_fedmr_init_state():
    """FedMR init: m = max(1, round(rho K)) copies of w_0 unless ``models`` sets m (up to K itself);
    the recombination units of the chosen ``layer`` kind and their segments (Sec. 5.4.2, x = 1:
    one segment)."""
    model = bn_model()
    fed = make_federation(make_data(FEDMR_DATA), model, HP, 0.6)
    initial = model_weights(model)
    for participation, m in ((0.6, 3), (0.1, 1)):  # round(3.0) = 3; round(0.5) = 0 -> 1
        fed.participation = participation
        state = ALGORITHMS["fedmr"]().init(fed, initial)
        assert all(v.shape[0] == m for v in state["models"].values())
        for k, v in initial.items():
            assert torch.equal(state["models"][k], v.expand(m, *v.shape))
    state = ALGORITHMS["fedmr"](models=5).init(fed, initial)  # m = K is allowed
    assert state["models"]["0.weight"].shape[0] == 5 and state["global"] is initial
    assert state["units"] == recombination_units(model) and state["segments"] == [0, 1, 2]
    state = ALGORITHMS["fedmr"](layer="entry", partition=1.0).init(fed, initial)
    assert state["units"] == [[k] for k in model.state_dict()]
    assert state["segments"] == [1] * len(model.state_dict())


def test_sample_distinct_draws_count_clients_from_the_federation_stream():
    """``sample_distinct``: ``count`` distinct clients, the first ``count`` of a uniform permutation of
    the K clients drawn from the round's sample stream, sorted; all K at most; no count means the
    federation's own sampling (max(1, round(rho K))).  No round begun: round 0, the draws numbered 0, 1, 2."""
    fed = make_federation(make_data([4, 4, 4, 4, 4]), mlp(), HP, 0.4, seed=9)
    assert sample_distinct(fed, 3).tolist() == sorted(torch.randperm(5, generator=stream(9, "sample", 0, 0))[:3].tolist())
    assert sample_distinct(fed, 5).tolist() == [0, 1, 2, 3, 4]
    assert sample_distinct(fed, None).tolist() == sorted(torch.randperm(5, generator=stream(9, "sample", 0, 2))[:2].tolist())
    with pytest.raises(ValueError, match="m = 6 exceeds the number of clients"):
        sample_distinct(fed, 6)


def test_fedmr_and_fedindep_settings_at_their_limits():
    """FedMR's settings (module docstring): first_stage_rounds >= 0, partition x in [0, 1] (both ends
    allowed: 0 = per layer, 1 = whole models), m >= 1 (None = the participation's)."""
    for kwargs in ({"first_stage_rounds": 0}, {"partition": 0.0}, {"partition": 1.0}, {"models": 1}, {"models": None}):
        ALGORITHMS["fedmr"](**kwargs)
    ALGORITHMS["fedindep"](models=1)
    for kwargs, field in (({"first_stage_rounds": -1}, "first_stage_rounds"), ({"partition": -0.01}, "partition"),
                          ({"partition": 1.01}, "partition"), ({"models": 0}, "models")):
        with pytest.raises(ValueError, match=field):
            ALGORITHMS["fedmr"](**kwargs)
    with pytest.raises(ValueError, match="models"):
        ALGORITHMS["fedindep"](models=0)


def test_fedmr_plan_check_allows_its_limits_themselves():
    """FedMR's plan check (``check_plan``): the aggregation stage may take every round of the
    experiment (first_stage_rounds = rounds: FedAvg with uniform weights throughout) but not more,
    and m may equal a partition's number of clients (every client trains each round) but not exceed it."""
    plan = PlanContext(name="fedmr", entry={}, training={"rounds": 4}, clients={"dir": 6, "iid": 8})
    assert ALGORITHMS["fedmr"](first_stage_rounds=4).check_plan(plan) is None
    assert ALGORITHMS["fedmr"](first_stage_rounds=5).check_plan(plan) == (
        "algorithms.fedmr.first_stage_rounds = 5 exceeds the experiment's rounds (4)")
    assert ALGORITHMS["fedmr"](models=6).check_plan(plan) is None
    assert ALGORITHMS["fedmr"](models=7).check_plan(plan) == (
        "algorithms.fedmr.models = 7 intermediate models exceed the 6 clients of partitions.dir")
    assert ALGORITHMS["fedmr"]().check_plan(plan) is None


def test_fedmr_refuses_a_round_whose_sample_no_longer_matches_its_models():
    """FedMR module docstring: without ``models``, m is the number of clients sampled per round, and
    intermediate model i is trained by the i-th sampled client.  A state built for m = 3 (participation
    0.6 of 5 clients) meeting a federation that now samples 2 per round (0.4) is refused, not trained
    on 3 clients the federation would not sample; with ``models = 3`` the round draws 3 all the same."""
    model = mlp()
    fed = make_federation(make_data(FEDMR_DATA), model, HP, 0.6)
    state = ALGORITHMS["fedmr"]().init(fed, model_weights(model))
    fed.participation = 0.4
    with pytest.raises(ValueError, match="FedMR keeps 3 intermediate models but 2 clients were sampled"):
        ALGORITHMS["fedmr"]().round(fed, state, 1)
    state, _ = ALGORITHMS["fedmr"](models=3).round(fed, state, 1)
    assert state["models"]["1.weight"].shape[0] == 3

def test_recombination_units_of_a_module_with_its_own_parameter():
    """Recombination units (module docstring): in module registration order, a module's own
    parameters and buffers form a unit; a root module's own parameter is a unit named without a
    prefix, first; a normalisation layer joins the unit before it."""

    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))
            self.fc = nn.Linear(3, 2)
            self.norm = nn.LayerNorm(2)

    assert recombination_units(Root()) == [["scale"], ["fc.weight", "fc.bias", "norm.weight", "norm.bias"]]


def test_random_choices_come_only_from_the_given_generator():
    """Reproducibility (``Federation``: the generator drives the run's randomness): FedMut's mutation
    coefficients, FedMR's layer permutations and its client draw depend only on the generator they
    are given, not on torch's global stream."""
    w = {"a": torch.arange(6.0), "n": torch.tensor(2)}
    delta = {"a": torch.ones(6)}
    stacked = {k: torch.stack([v * i for i in range(4)]) for k, v in w.items()}
    fed_args = (make_data([4, 4, 4, 4, 4]), mlp(), HP, 0.4)
    runs = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        mutated = mutate(w, delta, 4, 2.0, 0.3, torch.Generator().manual_seed(11))
        shuffled = recombine(stacked, [["a"], ["n"]], [0, 1], torch.Generator().manual_seed(11))
        chosen = sample_distinct(make_federation(*fed_args, seed=11), 3)
        runs.append((mutated, shuffled, chosen))
    (m0, s0, c0), (m1, s1, c1) = runs
    for k in w:
        assert torch.equal(m0[k], m1[k]) and torch.equal(s0[k], s1[k])
    assert torch.equal(c0, c1)


# ---- FedMut -----------------------------------------------------------------------------------------


def test_fedmut_init_keeps_one_model_per_sampled_client():
    """FedMut module docstring: m intermediate models, one per sampled client (m = max(1, round(rho K))),
    all starting at w_0, which is also the first w_old."""
    model = mlp()
    fed = make_federation(make_data([4, 4, 4, 4]), model, HP, 0.5)
    initial = model_weights(model)
    algorithm = ALGORITHMS["fedmut"]()
    for participation, m in ((0.5, 2), (1.0, 4), (0.1, 1)):
        fed.participation = participation
        state = algorithm.init(fed, initial)
        assert state["global"] is initial
        for k, v in initial.items():
            assert torch.equal(state["models"][k], v.expand(m, *v.shape))


def test_mutate_copies_integer_entries_of_any_shape_and_keeps_every_dtype():
    """FedMut module docstring: entry k of model j is w_glob[k] + alpha Delta[k] c_kj, the m = 4
    coefficients of each entry two 1s and two -1 + rate; integer entries are not mutated but copied
    from w_glob, whatever their shape and wherever they sit in the state dict (BatchNorm's counter
    lies between two layers' weights); every entry keeps its dtype.  rate = 0.5 (c in {1, -1/2}),
    alpha = 2 and small dyadic values make every product exact, in bfloat16 too."""
    w = {"w": torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.5]], dtype=torch.float64), "count": torch.tensor(5),
         "steps": torch.tensor([4, 9]), "b": torch.tensor([1.0, 2.0, -3.0], dtype=torch.bfloat16)}
    delta = {"w": torch.tensor([[0.25, -0.5, 1.0], [2.0, 0.125, -1.0]], dtype=torch.float64),
             "b": torch.tensor([0.25, -0.5, 1.0], dtype=torch.bfloat16)}
    out = mutate(w, delta, 4, 2.0, 0.5, torch.Generator().manual_seed(0))
    assert list(out) == ["w", "count", "steps", "b"]
    assert out["count"].tolist() == [5] * 4 and out["steps"].tolist() == [[4, 9]] * 4
    for k in ("count", "steps"):
        assert out[k].dtype == torch.int64
    for k in ("w", "b"):
        assert out[k].dtype == w[k].dtype and out[k].shape == (4, *w[k].shape)
        up, down = w[k] + 2.0 * delta[k], w[k] - delta[k]
        is_up = [torch.equal(out[k][j], up) for j in range(4)]
        assert sum(is_up) == 2 and all(u or torch.equal(out[k][j], down) for j, u in enumerate(is_up)), k


# ---- FedGen --------------------------------------------------------------------------------------


def test_generator_layers_and_forward_by_hand():
    """FedGen generator (module docstring, notes §2.6): [noise ; one-hot(y)] -> Linear(noise_dim + C,
    hidden) - BatchNorm - ReLU -> Linear(hidden, latent); FedGen's defaults noise_dim = 100,
    hidden = 512.  The forward pass recomputed by hand (training-mode BatchNorm: batch mean, biased
    variance, eps 1e-5) on labels that miss the last class (the one-hot keeps C columns)."""
    default = Generator(3, 4)
    assert (default.noise_dim, default.net[0].in_features, default.net[0].out_features) == (100, 103, 512)
    assert [type(layer) for layer in default.net] == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear]
    assert default.net[1].num_features == 512 and (default.net[3].in_features, default.net[3].out_features) == (512, 4)

    torch.manual_seed(0)
    gen = Generator(3, 4, noise_dim=5, hidden=6)
    with torch.no_grad():
        gen.net[1].weight.uniform_(0.5, 1.5)
        gen.net[1].bias.uniform_(-0.5, 0.5)
    y = torch.tensor([0, 1, 0, 1, 1])
    noise = torch.rand(5, 5, generator=torch.Generator().manual_seed(1))
    x = torch.cat([noise, torch.eye(3)[y]], 1)
    h = x @ gen.net[0].weight.T + gen.net[0].bias
    h = (h - h.mean(0)) / torch.sqrt(h.var(0, unbiased=False) + 1e-5) * gen.net[1].weight + gen.net[1].bias
    want = torch.relu(h) @ gen.net[3].weight.T + gen.net[3].bias
    torch.testing.assert_close(gen.train()(y, noise), want, atol=1e-5, rtol=1e-5)


def test_head_names_find_the_last_linear_layer():
    """FedGen module docstring: the head is the model's *last* nn.Linear (with its bias); its input
    width is the generator's latent size.  A model without one, or whose last Linear has no bias,
    is refused."""
    model = nn.Sequential(nn.Linear(5, 7, bias=False), nn.ReLU(), nn.Sequential(nn.Linear(7, 4), nn.ReLU()))
    model.add_module("head", nn.ModuleDict({"fc": nn.Linear(4, 3)}))
    assert head_names(model) == ("head.fc.weight", "head.fc.bias", 4)
    with pytest.raises(ValueError, match="last layer is an nn.Linear with a bias"):
        head_names(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten()))
    with pytest.raises(ValueError, match="last layer is an nn.Linear with a bias"):
        head_names(nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3, bias=False)))


def test_diversity_loss_by_a_loop_over_pairs():
    """FedGen's DiversityLoss('l1') (module docstring): exp(-mean_ij d_noise(i, j) d_out(i, j)) with
    d_noise the mean squared and d_out the mean absolute difference, over all ordered pairs."""
    gen = torch.Generator().manual_seed(2)
    noise, out = torch.rand(5, 3, generator=gen, dtype=torch.float64), torch.randn(5, 4, generator=gen, dtype=torch.float64)
    total = 0.0
    for i in range(5):
        for j in range(5):
            total += float(((noise[i] - noise[j]) ** 2).mean()) * float((out[i] - out[j]).abs().mean())
    assert float(diversity_loss(noise, out)) == pytest.approx(math.exp(-total / 25), rel=1e-12)


@pytest.mark.parametrize("diversity", [0.0, 2.5])
def test_generator_loss_by_a_loop_over_heads_and_samples(diversity):
    """FedGen Eq. (4) (module docstring): sum_u mean_b w_{u,y_b} CE(head_u(G(y_b)), y_b) +
    diversity x DiversityLoss, here with U = 2 heads, a 3-class label share and a batch of 6."""
    torch.manual_seed(0)
    gen = Generator(3, 4, noise_dim=5, hidden=6).eval()
    heads = (torch.randn(2, 3, 4), torch.randn(2, 3))
    share = torch.tensor([[1.0, 0.25, 0.0], [0.0, 0.75, 1.0]])
    y = torch.tensor([0, 1, 2, 1, 1, 2])
    noise = torch.rand(6, 5, generator=torch.Generator().manual_seed(4))
    z = gen(y, noise).detach()
    teacher = 0.0
    for u in range(2):
        per_sample = [float(share[u, y[b]]) * float(F.cross_entropy((heads[0][u] @ z[b] + heads[1][u])[None], y[b:b + 1]))
                      for b in range(6)]
        teacher += sum(per_sample) / 6
    want = teacher + diversity * float(diversity_loss(noise, z))
    assert float(generator_loss(gen, heads, share, y, noise, diversity).detach()) == pytest.approx(want, rel=1e-5)


def test_fedgen_init_counts_labels_and_seeds_the_generator_from_the_run():
    """FedGen init: n_{k,y} per client (padding rows excluded, a class no client holds gets a zero
    column); the generator's initial weights come from a seed drawn from the federation's stream
    (one ``randint(2^31)``) without touching torch's global stream; Adam with lr ``generator_lr`` and
    weight decay 1e-2 (notes §2.6) on the generator's parameters; the head is the model's last Linear."""
    for sizes in ([5, 5, 5], [6, 3, 4]):  # no padding / padding
        data = make_data(sizes)
        for c, n in enumerate(sizes):
            data.y[data.train.index[c][:n]] = torch.arange(n) % 2 if c != 1 else torch.ones(n, dtype=torch.long)
        model = mlp()
        fed = make_federation(data, model, HP, 1.0, seed=13)  # a seed whose randint(2^31) differs from randint(2^32)
        algorithm = ALGORITHMS["fedgen"](noise_dim=4, hidden=8, generator_lr=5e-3)
        g = copy_of(fed.generator)
        torch.manual_seed(123)
        state = algorithm.init(fed, model_weights(model))
        after = torch.rand(3)
        torch.manual_seed(123)
        torch.testing.assert_close(after, torch.rand(3))  # the global stream did not move

        want = torch.stack([torch.bincount(data.y[data.train.index[c][:n]], minlength=3) for c, n in enumerate(sizes)])
        assert want[:, 2].sum() == 0
        torch.testing.assert_close(state["label_counts"], want.double())

        seed = int(torch.randint(2**31, (1,), generator=g))
        torch.manual_seed(seed)
        expected = Generator(3, 4, noise_dim=4, hidden=8)
        for k, v in expected.state_dict().items():
            torch.testing.assert_close(state["generator"].state_dict()[k], v)
        assert torch.equal(torch.rand(4, generator=fed.generator), torch.rand(4, generator=g))

        group = state["optimizer"].param_groups[0]
        assert isinstance(state["optimizer"], torch.optim.Adam)
        assert group["lr"] == 5e-3 and group["weight_decay"] == 1e-2
        assert [id(p) for p in group["params"]] == [id(p) for p in state["generator"].parameters()]
        assert state["head"] == ("3.weight", "3.bias") and state["trained_generator"] is False
        assert state["generator_losses"] == []


def generator_steps_by_hand(generator, heads, counts, g, steps, batch, noise_dim, lr):
    """FedGen's server step (Eq. (4); notes §2.6), written out: y uniform over the labels the round's
    clients hold, teacher = sum_u mean_b w_{u,y_b} CE(head_u(G(y_b)), y_b), w_{u,y} = n_{u,y} / sum_u' n_{u',y},
    plus exp(-mean_ij d_eps d_G); Adam with weight decay 1e-2.  Returns the losses."""
    share = counts / counts.sum(0).clamp_min(1e-12)
    present = torch.tensor([c for c in range(counts.shape[1]) if counts[:, c].sum() > 0])
    opt = torch.optim.Adam(generator.parameters(), lr=lr, weight_decay=1e-2)
    generator.train()
    losses = []
    for _ in range(steps):
        y = present[torch.randint(len(present), (batch,), generator=g)]
        noise = torch.rand(batch, noise_dim, generator=g)
        z = generator(y, noise)
        teacher = sum((share[u, y].float() * F.cross_entropy(z @ w.T + b, y, reduction="none")).mean()
                      for u, (w, b) in enumerate(zip(*heads)))
        d_out = (z[:, None] - z[None]).abs().mean(-1)
        d_noise = (noise[:, None] - noise[None]).pow(2).mean(-1)
        loss = teacher + torch.exp(-(d_noise * d_out).mean())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_fedgen_trains_its_generator_on_the_labels_present_and_records_the_last_loss():
    """FedGen round 1 (module docstring): y is drawn uniformly from the labels the round's clients
    hold -- here labels 0 and 2 (label 1 absent; label 2 held by a single sample), with shares
    w_{.,0} = (6/10, 4/10) and w_{.,2} = (0, 1) -- the generator trains in training mode, and the
    round records the last of its losses."""
    data = make_data([6, 5])
    data.y[data.train.index[0][:6]] = 0
    data.y[data.train.index[1][:5]] = torch.tensor([0, 0, 2, 0, 0])
    model = mlp()
    hp = LocalSGD(epochs=1, batch_size=3, lr=0.3)
    fed = make_federation(data, model, hp, 1.0, seed=13)
    algorithm = ALGORITHMS["fedgen"](noise_dim=4, hidden=8, generator_epochs=1, teacher_iterations=3, generator_batch=8,
                                     generator_lr=1e-2)
    state = algorithm.init(fed, model_weights(model))
    generator = copy.deepcopy(state["generator"])
    state["generator"].eval()
    g = copy_of(fed.generator)  # FedGen's own draws
    streams = Streams(13)
    streams.begin(1)
    chosen, trained = sample_and_train(data, model, hp, streams, [state["global"]] * 2, 2)
    counts = label_counts(data, chosen.tolist())
    torch.testing.assert_close(counts, torch.tensor([[6.0, 0, 0], [4, 0, 1]], dtype=torch.float64))
    heads = (torch.stack([t["3.weight"] for t in trained]), torch.stack([t["3.bias"] for t in trained]))
    losses = generator_steps_by_hand(generator, heads, counts, g, 3, 8, 4, 1e-2)
    fed.begin_round(1)
    state, _ = algorithm.round(fed, state, 1)
    for k, v in model_weights(generator).items():
        torch.testing.assert_close(state["generator"].state_dict()[k], v, atol=1e-6, rtol=1e-5)
    assert len(set(losses)) == 3
    assert state["generator_losses"] == [pytest.approx(losses[-1], rel=1e-5)]
    assert state["trained_generator"] is True


@pytest.mark.parametrize("round_", [1, 3])
def test_fedgen_client_gradient_decays_alpha_beta_and_masks_the_real_samples(round_):
    """FedGen's client loss (module docstring; Zhu et al. Eq. (5)): per client,
    CE(f(x), y) + alpha_r CE(head(G(y_hat)), y_hat) + beta_r KL(softmax(head(G(y))) || softmax(f(x))),
    the CE and KL averaged over the client's real samples only (mask), G in evaluation mode, the
    generated inputs drawn from the federation's stream (noise for the real labels, then y_hat,
    then their noise); alpha_r = alpha decay^(r-1), beta_r = beta decay^(r-1) (FedGen's per-round
    decay): alpha = 0.7, beta = 0.3, decay 0.5 -> round 1: (0.7, 0.3), round 3: (0.175, 0.075).
    Client 0 has 3 real samples of 4, client 1 a single one.  The reported loss is the plain CE."""
    data = make_data([6, 6, 6])
    model = mlp()
    fed = make_federation(data, model, HP, 1.0, seed=14)
    algorithm = ALGORITHMS["fedgen"](generative_alpha=0.7, generative_beta=0.3, decay=0.5, noise_dim=4, hidden=8)
    state = algorithm.init(fed, model_weights(model))
    generator = state["generator"].train()
    with torch.no_grad():  # BatchNorm statistics away from (0, 1): evaluation mode differs visibly from training mode
        generator.net[1].running_mean.uniform_(-1.0, 1.0)
        generator.net[1].running_var.uniform_(0.5, 2.0)
    step = algorithm._client_gradient(fed, state, round_)
    alpha, beta = 0.7 * 0.5 ** (round_ - 1), 0.3 * 0.5 ** (round_ - 1)

    gen = torch.Generator().manual_seed(0)
    params = {n: p.detach().unsqueeze(0) + 0.3 * torch.randn(2, *p.shape, generator=gen) for n, p in model.named_parameters()}
    x, y = torch.randn(2, 4, 5, generator=gen), torch.randint(3, (2, 4), generator=gen)
    mask = torch.tensor([[1.0, 1, 1, 0], [0, 1, 0, 0]])
    g = copy_of(fed.generator)
    grads, ce = step(params, {}, x, y, mask)

    eval_generator = copy.deepcopy(generator).eval()
    with torch.no_grad():
        z_real = eval_generator(y.reshape(-1), torch.rand(8, 4, generator=g)).view(2, 4, -1)
        y_hat = torch.randint(3, (2, 4), generator=g)
        z_hat = eval_generator(y_hat.reshape(-1), torch.rand(8, 4, generator=g)).view(2, 4, -1)
    for c in range(2):
        leaves = {n: v[c].clone().requires_grad_() for n, v in params.items()}
        logits = functional_call(model, leaves, (x[c],))
        real = mask[c].bool()
        plain = F.cross_entropy(logits[real], y[c][real])
        w, b = leaves["3.weight"], leaves["3.bias"]
        target = torch.softmax(z_real[c] @ w.detach().T + b.detach(), 1)
        kl = (target * (target.log() - torch.log_softmax(logits, 1))).sum(1)[real].mean()
        teacher = F.cross_entropy(z_hat[c] @ w.T + b, y_hat[c])
        want = torch.autograd.grad(plain + alpha * teacher + beta * kl, list(leaves.values()))
        for n, gw in zip(leaves, want):
            torch.testing.assert_close(grads[n][c], gw, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(ce[c], plain.detach())
    assert not generator.training  # the client step uses the generator in evaluation mode



def test_fedgen_client_step_draws_each_clients_own_dropout_masks():
    """FedGen's client step is vmapped over the clients, and each client draws its own dropout masks
    (as the engine's plain local step does) on a model with dropout: the registry's ``mlp_dropout``
    (FLT Table 11, dropout 0.5).  With alpha = beta = 0 the local loss is the plain CE, so two clients
    at the same weights on the same minibatch differ only by their masks: their gradients and losses
    differ, and each is a gradient of that client's CE under some mask (finite, the right shapes)."""
    data = make_data([6, 6])
    model = build_model({"arch": "mlp_dropout", "hidden": 16}, (5,), 3)
    fed = make_federation(data, model, HP, 1.0, seed=3)
    algorithm = ALGORITHMS["fedgen"](generative_alpha=0.0, generative_beta=0.0, noise_dim=4, hidden=8)
    state = algorithm.init(fed, model_weights(model))
    step = algorithm._client_gradient(fed, state, 2)
    params = broadcast({n: p.detach() for n, p in model.named_parameters()}, 2)
    rows = data.train.index[0][:4]
    x, y = data.x[rows].expand(2, 4, 5), data.y[rows].expand(2, 4)
    torch.manual_seed(0)
    model.train()
    grads, ce = step(params, {}, x, y, torch.ones(2, 4))
    for n, p in model.named_parameters():
        assert grads[n].shape == (2, *p.shape) and torch.isfinite(grads[n]).all()
    assert not torch.allclose(grads["1.weight"][0], grads["1.weight"][1])
    assert ce.shape == (2,) and float(ce[0]) != float(ce[1])

# ---- the custom local step's loss --------------------------------------------------------------------


def test_masked_cross_entropy_averages_over_the_real_samples_only():
    """Custom local steps (module docstring): short last batches are masked sample-wise, so a
    client's loss is the mean cross-entropy over its real samples: one real sample -> its own CE,
    three of four -> their mean, none -> 0."""
    model = mlp()
    params = {n: p.detach() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 5, generator=gen), torch.tensor([0, 2, 1, 2])
    loss = masked_cross_entropy(model)
    per_sample = F.cross_entropy(model(x), y, reduction="none").detach()
    torch.testing.assert_close(loss(params, {}, x, y, torch.tensor([0.0, 1, 0, 0])), per_sample[1])
    torch.testing.assert_close(loss(params, {}, x, y, torch.tensor([1.0, 1, 0, 1])), per_sample[[0, 1, 3]].mean())
    assert float(loss(params, {}, x, y, torch.zeros(4))) == 0.0


def test_segments_partition_edge():
    """Sec. 5.4.2: x = 1 puts all N layers in segment ceil(j / N) = 1; x = 0.5 of N = 3 layers gives
    ceil(j / 1.5) = 1, 2, 2."""
    assert segment_of_units(3, 1.0) == [1, 1, 1]
    assert segment_of_units(3, 0.5) == [1, 2, 2]


def test_the_server_steps_keep_the_models_device():
    """FedMR's average (Alg. 1 line 11), recombination (line 10) and FedMut's mutation build their
    coefficients and permutations on the CPU; each must meet the models on their own device.  The
    meta device stands in for a GPU: any CPU tensor mixed into its arithmetic raises, as CUDA does
    (the average's CPU weights stopped every FedMR and FedMut cell on a GPU at its first round)."""
    m = 4
    stacked = {"w": torch.zeros(m, 3, 2, device="meta"), "b": torch.zeros(m, 2, device="meta")}
    average = uniform_average(stacked)
    assert {k: (v.device.type, tuple(v.shape)) for k, v in average.items()} == {"w": ("meta", (3, 2)), "b": ("meta", (2,))}
    mixed = recombine(stacked, [["w"], ["b"]], [0, 1], torch.Generator().manual_seed(0))
    assert all(v.device.type == "meta" and v.shape == stacked[k].shape for k, v in mixed.items())
    mutated = mutate(average, average, m, 4.0, 0.3, torch.Generator().manual_seed(0))
    assert all(v.device.type == "meta" and v.shape == stacked[k].shape for k, v in mutated.items())

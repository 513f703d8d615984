"""Common random numbers (fedbench.engine.streams, fedbench.algorithms.base.Federation): two methods on
one seed and partition sample the same clients every round and visit the same batches, whatever else
each draws; a client's batch order depends on its own stream only; the streams' keys as the module
documents them, recomputed here from numpy's SeedSequence."""

import numpy as np
import pytest
import torch
from torch import nn

from conftest import make_data, make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.streams import PURPOSES, client_streams, stream, stream_seed
from fedbench.engine.weights import model_weights

SIZES = [9, 14, 7, 12, 10, 11]
HP = LocalSGD(epochs=2, batch_size=4, lr=0.2)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))


def draws_of(method: str, params: dict, rounds: int = 4, seed: int = 3, participation: float = 0.5):
    """Run ``method`` for ``rounds`` rounds as the pipeline does (``begin_round``) and record, per round,
    the clients it sampled and every batch plan it drew (clients, order)."""
    fed = make_federation(make_data(SIZES), mlp(), HP, participation=participation, seed=seed)
    plans, sampled = [], []
    batch_plan = fed.batch_plan

    def recording(clients, epochs, batch_size):
        plan = batch_plan(clients, epochs, batch_size)
        plans[-1].append((clients.tolist(), plan.order.clone()))
        return plan

    fed.batch_plan = recording
    algorithm = ALGORITHMS[method](**params)
    state = algorithm.init(fed, model_weights(fed.model))
    for t in range(1, rounds + 1):
        plans.append([])
        fed.begin_round(t)
        state, _ = algorithm.round(fed, state, t)
        sampled.append(fed.sampled.tolist())
    return sampled, plans, state


@pytest.mark.parametrize("other, params", [
    ("fedprox", {"mu": 1.0}),        # the same draws, another local objective
    ("ifca", {"num_clusters": 2}),   # draws its cluster models' initialisation from its own stream first
    ("fedmr", {}),                   # shuffles the layers from its own stream every round
    ("local", {}),
])
def test_two_methods_on_one_seed_sample_the_same_clients_and_visit_the_same_batches(other, params):
    sampled, plans, _ = draws_of("fedavg", {})
    other_sampled, other_plans, _ = draws_of(other, params)
    assert sampled == other_sampled
    assert len({tuple(s) for s in sampled}) > 1  # the sample changes from round to round
    for t, (mine, theirs) in enumerate(zip(plans, other_plans), 1):
        clients, order = mine[0]  # every method's first local-training pass of round t
        other_clients, other_order = theirs[0]
        assert clients == other_clients == sampled[t - 1]
        assert torch.equal(order, other_order), f"round {t}"


def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit_over_several_rounds():
    *_, fedavg = draws_of("fedavg", {}, rounds=5)
    *_, fedprox = draws_of("fedprox", {"mu": 0.0}, rounds=5)
    for name, value in fedavg["global"].items():
        assert torch.equal(value, fedprox["global"][name]), name


def test_a_method_drawing_from_its_own_stream_leaves_the_shared_draws_unchanged():
    """Drawing from ``fed.generator`` between rounds (as IFCA's initialisation or FedMR's shuffle
    does) changes neither the next round's clients nor their batches."""
    results = []
    for extra in (0, 1000):
        fed = make_federation(make_data(SIZES), mlp(), HP, participation=0.5, seed=1)
        torch.rand(extra, generator=fed.generator)
        fed.begin_round(2)
        clients = fed.sample_clients()
        results.append((clients.tolist(), fed.batch_plan(clients, 2, 4).order))
    assert results[0][0] == results[1][0] and torch.equal(results[0][1], results[1][1])


def test_a_clients_batch_order_depends_on_its_own_stream_not_on_the_others():
    """Client 2's permutations are the same whether it trains beside clients 0 and 1 or beside 5,
    whose larger data pads the plan to a longer row."""
    counts = torch.tensor(SIZES)
    alone_with_small = make_batch_plan(counts[[0, 2]], 3, 4, client_streams(7, "batches", (1, 0), [0, 2]))
    with_large = make_batch_plan(counts[[2, 1]], 3, 4, client_streams(7, "batches", (1, 0), [2, 1]))
    n = SIZES[2]
    assert torch.equal(alone_with_small.order[1, :, :n], with_large.order[0, :, :n])
    for e in range(3):  # each epoch's row prefix is a permutation of the client's positions
        assert sorted(with_large.order[0, e, :n].tolist()) == list(range(n))
    assert not torch.equal(with_large.order[0, 0, :n], with_large.order[0, 1, :n])  # a fresh one each epoch


def test_stream_keys_are_numpys_seed_sequence_of_seed_purpose_and_position():
    expected = int(np.random.SeedSequence([5, PURPOSES["batches"], 3, 1, 4]).generate_state(1, np.uint64)[0]) >> 1
    assert stream_seed(5, "batches", 3, 1, 4) == expected
    assert torch.equal(torch.rand(4, generator=stream(5, "batches", 3, 1, 4)),
                       torch.rand(4, generator=torch.Generator().manual_seed(expected)))
    neighbours = {stream_seed(5, purpose, t, k) for purpose in PURPOSES for t in range(3) for k in range(3)}
    assert len(neighbours) == len(PURPOSES) * 9  # every key its own stream
    with pytest.raises(ValueError, match="non-negative"):
        stream_seed(5, "sample", -1)


def test_a_round_starts_torchs_global_generator_on_its_own_stream():
    """Dropout masks come from torch's global generator, set at the start of every round from
    ``(seed, torch, t)``: whatever the previous round drew, round t's masks are the same."""
    fed = make_federation(make_data(SIZES), mlp(), HP, seed=2)
    fed.begin_round(3)
    first = torch.rand(5)
    torch.rand(100)  # another method's use of the global generator
    fed.begin_round(3)
    assert torch.equal(torch.rand(5), first)
    assert torch.equal(first, torch.rand(5, generator=torch.Generator().manual_seed(stream_seed(2, "torch", 3))))


def test_draws_within_a_round_are_numbered_and_rounds_without_begin_round_still_differ():
    """The second training pass of a round (Ditto's personal update after its global one) gets the
    next stream, not the first pass's again; a caller that never begins a round still gets distinct
    samples round after round (numbered over the run)."""
    fed = make_federation(make_data(SIZES), mlp(), HP, seed=4)
    fed.begin_round(1)
    clients = torch.tensor([0, 3])
    first, second = fed.batch_plan(clients, 1, 4), fed.batch_plan(clients, 1, 4)
    assert not torch.equal(first.order, second.order)
    other = make_federation(make_data(SIZES), mlp(), HP, participation=0.5, seed=4)
    samples = {tuple(other.sample_clients().tolist()) for _ in range(6)}
    assert len(samples) > 1

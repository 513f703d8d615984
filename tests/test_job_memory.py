"""A training job's declared memory, and the read-only view global-model algorithms score with."""

import numpy as np
import torch

from fedbench.engine.evaluate import evaluate_clients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.weights import broadcast, is_shared, model_weights, shared
from fedbench.cost.memory import CLIENT_MODEL_COPIES, PROCESS_MB, model_bytes, train_job_mb
from fedbench.models import build_model


def test_model_bytes_of_the_mlp_by_hand():
    # 784-200-10: 784*200 + 200 + 200*10 + 10 = 159,010 float32 parameters
    assert model_bytes({"arch": "mlp", "hidden": [200]}, (784,), 10) == 159_010 * 4


def test_job_memory_grows_with_the_clients_model_state():
    """mem_mb = 2000 MB for the process + the working budget + 3 copies of every client's model (its
    personal model, one while it is scored, one while its rows are replaced; job_memory's docstring),
    by hand for the 784-200-10 MLP (636,040 bytes a model)."""
    assert (PROCESS_MB, CLIENT_MODEL_COPIES) == (2000, 3)  # the documented choice, stated literally
    mlp = {"arch": "mlp", "hidden": [200]}
    # 3 * 500 * 636,040 B = 954,060,000 B = 909.86 MiB;  2000 + 1024 + 909.86 = 3933.86 -> 3934
    assert train_job_mb(mlp, [784], 10, 500, 1024) == 3934
    # 1000 clients: 1819.73 MiB of model state -> 4843.73 -> 4844;  10 clients, 512 MB budget: 2530.20 -> 2531
    assert train_job_mb(mlp, [784], 10, 1000, 1024) == 4844
    assert train_job_mb(mlp, [784], 10, 10, 512) == 2531


def test_shared_is_a_view_and_scores_like_copies():
    torch.manual_seed(0)
    model = build_model({"arch": "mlp", "hidden": [8]}, (5,), 3)
    single = model_weights(model)
    view = shared(single, 4)
    assert is_shared(view) and not is_shared(broadcast(single, 4))
    assert all(view[k].untyped_storage().data_ptr() == single[k].untyped_storage().data_ptr() for k in single)
    x, y = torch.randn(40, 5), torch.randint(0, 3, (40,))
    index = ClientIndex.from_lists([np.arange(c * 10, c * 10 + 10) for c in range(4)], "cpu")
    data = FederatedData(x, y, index, index, 3)
    clients = torch.arange(4)
    a = evaluate_clients(model, view, data, data.test, clients)
    b = evaluate_clients(model, broadcast(single, 4), data, data.test, clients)
    np.testing.assert_array_equal(a.correct, b.correct)
    np.testing.assert_allclose(a.loss_sum, b.loss_sum, rtol=1e-6)

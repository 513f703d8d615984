"""A training job's declared memory, and the read-only view global-model algorithms score with."""

import math

import numpy as np
import torch

from fedbench.engine.evaluate import evaluate_clients
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.weights import broadcast, is_shared, model_weights, shared
from fedbench.job_memory import CLIENT_MODEL_COPIES, PROCESS_MB, model_bytes, train_job_mb
from fedbench.models import build_model


def test_model_bytes_of_the_mlp_by_hand():
    # 784-200-10: 784*200 + 200 + 200*10 + 10 = 159,010 float32 parameters
    assert model_bytes({"arch": "mlp", "hidden": [200]}, (784,), 10) == 159_010 * 4


def test_job_memory_grows_with_the_clients_model_state():
    per_model = 159_010 * 4
    expected = math.ceil(PROCESS_MB + 1024 + CLIENT_MODEL_COPIES * 500 * per_model / 2**20)
    assert train_job_mb({"arch": "mlp", "hidden": [200]}, [784], 10, 500, 1024) == expected


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

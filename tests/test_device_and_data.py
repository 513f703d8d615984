"""Device choice, peak-memory accounting and the clients' data on the device (fedbench/engine/device.py,
federated_data.py), checked directly rather than only through a pipeline run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedbench.data.partition import Partition
from fedbench.data.sources import ArrayDataset
from fedbench.engine import device as device_module
from fedbench.engine.device import peak_memory_mb, resolve_device
from fedbench.engine.federated_data import ClientIndex, FederatedData


@pytest.mark.parametrize("cuda", [False, True])
def test_auto_picks_cuda_exactly_when_it_is_available(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device("auto") == torch.device("cuda" if cuda else "cpu")
    assert resolve_device() == resolve_device("auto")


def test_a_named_device_is_taken_as_given(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


def test_cuda_without_cuda_is_one_clear_error_and_cpu_is_still_fine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"device 'cuda:0' requested but CUDA is not available"):
        resolve_device("cuda:0")
    assert resolve_device("cpu") == torch.device("cpu")


def _vm_hwm_mib() -> float:
    """Peak resident set size as the kernel reports it in /proc (kB): an independent reading of ru_maxrss."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/self/status")


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_peak_host_memory_is_the_kernels_peak_rss_in_mib():
    kernel = _vm_hwm_mib()
    reported = peak_memory_mb(torch.device("cpu"))
    assert set(reported) == {"peak_host_rss_mb"}  # no device entry on the CPU
    assert reported["peak_host_rss_mb"] == pytest.approx(kernel, abs=2.0)


class _Usage:
    def __init__(self, ru_maxrss):
        self.ru_maxrss = ru_maxrss


@pytest.mark.parametrize(("platform", "ru_maxrss", "mib"), [
    ("linux", 1000 * 1024, 1000.0),             # Linux reports kB
    ("linux", 1290, 1.3),                       # 1.2598 MiB, to one decimal
    ("darwin", 3 * 2**20 + 2**18, 3.2),         # macOS reports bytes: 3.25 MiB rounds to 3.2 (half to even)
    ("darwin", int(3.26 * 2**20), 3.3),
])
def test_peak_host_memory_reads_the_units_each_platform_reports(monkeypatch, platform, ru_maxrss, mib):
    """``ru_maxrss`` is in kB on Linux and in bytes on macOS (getrusage(2) of each); MiB to one decimal."""
    monkeypatch.setattr(device_module.sys, "platform", platform)
    monkeypatch.setattr(device_module.resource, "getrusage", lambda who: _Usage(ru_maxrss))
    assert peak_memory_mb(torch.device("cpu")) == {"peak_host_rss_mb": mib}


def test_on_cuda_the_peak_allocated_device_memory_is_added_in_mib(monkeypatch):
    seen = []

    def max_memory_allocated(device):
        seen.append(device)
        return int(3.26 * 2**20)  # 3.26 MiB: 3.3 to one decimal

    monkeypatch.setattr(device_module.torch.cuda, "max_memory_allocated", max_memory_allocated)
    reported = peak_memory_mb(torch.device("cuda", 0))
    assert reported["peak_device_allocated_mb"] == 3.3
    assert seen == [torch.device("cuda", 0)]
    assert set(reported) == {"peak_host_rss_mb", "peak_device_allocated_mb"}


def _tiny_dataset() -> ArrayDataset:
    x = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)
    return ArrayDataset(x=x, y=np.array([0, 1, 2, 0, 1, 2, 0]), num_classes=3)


@pytest.mark.parametrize("with_val", [False, True])
def test_build_puts_every_clients_rows_on_the_device_as_the_partition_lists_them(with_val):
    dataset = _tiny_dataset()
    partition = Partition(
        train=[np.array([0, 2]), np.array([1, 3, 5]), np.array([6])],
        test=[np.array([4]), np.array([0, 4]), np.array([5, 6])],
        val=[np.array([3]), np.array([2]), np.array([1, 0])] if with_val else None,
    )
    data = FederatedData.build(dataset, partition, "cpu")
    assert torch.equal(data.x, torch.from_numpy(dataset.x)) and torch.equal(data.y, torch.from_numpy(dataset.y))
    assert data.num_classes == 3 and data.num_clients == 3 and data.input_shape == (2,)
    parts = {"train": data.train, "test": data.test} | ({"val": data.val} if with_val else {})
    for name, index in parts.items():
        lists = getattr(partition, name)
        assert index.counts.tolist() == [len(a) for a in lists], name
        assert [index.index[k, : len(a)].tolist() for k, a in enumerate(lists)] == [a.tolist() for a in lists], name
        assert index.mask().sum(1).tolist() == [len(a) for a in lists], name
    assert data.val is None if not with_val else data.val.index.shape == (3, 2)
    assert data.train.union.tolist() == [0, 1, 2, 3, 5, 6]


def test_client_index_pads_to_the_largest_client_and_keeps_an_empty_client_empty():
    index = ClientIndex.from_lists([np.array([4, 9, 7]), np.zeros(0, np.int64)], "cpu")
    assert index.index.tolist() == [[4, 9, 7], [0, 0, 0]]
    assert index.counts.tolist() == [3, 0]
    assert index.mask().tolist() == [[True, True, True], [False, False, False]]
    assert index.union.tolist() == [4, 7, 9]
    none = ClientIndex.from_lists([np.zeros(0, np.int64)], "cpu")
    assert none.index.shape == (1, 1) and none.mask().tolist() == [[False]]
    no_clients = ClientIndex.from_lists([], "cpu")
    assert no_clients.index.shape == (0, 1) and no_clients.counts.tolist() == []

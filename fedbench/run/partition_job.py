"""The partition job of the workflow: one dataset split into clients by one partition entry and
seed, written with the provenance of the code that split it (``workflow/scripts/partition.py``)."""

from __future__ import annotations

import logging

from fedbench.data import load_dataset, partition_dataset
from fedbench.data.partition_file import save_partition
from fedbench.registry.plugins import load_plugins
from fedbench.run.provenance import PARTITION_SCRIPTS, partition_roots, provenance

log = logging.getLogger("fedbench")


def build_partition(config: dict, dataset: str, partition: str, seed: int, npz_path, json_path) -> None:
    """Partition ``dataset`` with the config's ``partition`` entry and generator seed ``seed``."""
    load_plugins(config.get("plugins") or ())  # a plugin's dataset source or partitioner
    data = load_dataset(config["datasets"][dataset], config.get("data_root", "data"))
    spec = config["partitions"][partition]
    parts = partition_dataset(data, spec, seed)
    meta = {"dataset": dataset, "partition": partition, "seed": seed, "spec": spec, "input_shape": list(data.input_shape),
            "provenance": provenance(partition_roots(config["datasets"][dataset], spec), PARTITION_SCRIPTS)}
    save_partition(parts, data.y, data.num_classes, npz_path, json_path, meta)
    log.info("partition %s/%s seed %d: %d clients", dataset, partition, seed, parts.num_clients)

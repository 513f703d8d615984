"""Datasets (``sources``), non-IID partitioners (``partition`` + one module per family) and
their on-disk form (``partition_file``).  Importing this package registers every source
and partitioner."""

from fedbench.data import partitioners  # noqa: F401  (registers iid, dirichlet, natural)
from fedbench.data.partition import PARTITIONERS, ClientSamples, Partition, partition_dataset
from fedbench.data.sources import DATASETS, ArrayDataset, load_dataset

__all__ = ["DATASETS", "PARTITIONERS", "ArrayDataset", "ClientSamples", "Partition", "load_dataset", "partition_dataset"]

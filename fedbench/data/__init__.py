"""Layer 1, the data: datasets (``sources``), non-IID partitioners (``partition`` + one module per family) and
their on-disk form (``partition_file``).  Importing this package registers every source
and partitioner."""

from fedbench.data import leaf, vision  # noqa: F401  (register the image and LEAF sources)
from fedbench.data import partitioners, partitions_femam, partitions_flt, partitions_pfedmt  # noqa: F401  (register partitioners)
from fedbench.data import partitions_index_file  # noqa: F401  (the authors' exact splits as index files)
from fedbench.data.partition import PARTITIONERS, ClientSamples, Partition, partition_dataset
from fedbench.data.sources import DATASETS, ArrayDataset, load_dataset

__all__ = ["DATASETS", "PARTITIONERS", "ArrayDataset", "ClientSamples", "Partition", "load_dataset", "partition_dataset"]

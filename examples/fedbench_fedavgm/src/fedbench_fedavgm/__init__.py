"""FedAvgM as a fedbench plugin (the method lives in :mod:`fedbench_fedavgm.fedavgm`)."""

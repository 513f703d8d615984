"""The shape of a cell, what its cost depends on besides its settings: clients, samples, the input.

Read from the partition's summary once it exists (:func:`summary_shape`), else estimated from the
dataset's registered facts and the partition entry (:func:`estimated_shape`)."""

from __future__ import annotations

from dataclasses import dataclass

GLOBAL_TEST_SHARE = 1 / 6  # an official test set (MNIST, CIFAR: 10,000 of 60,000-70,000)


@dataclass(frozen=True)
class CellShape:
    """What the cost of a cell depends on besides its settings; ``estimated``: from dataset facts,
    before the partition exists."""

    num_clients: int
    train_samples: int  # over all clients
    eval_samples: int  # test + validation rows over all clients
    largest_client: int  # training samples of the largest client (its effective batch)
    input_shape: tuple[int, ...]
    num_classes: int
    dataset_samples: int  # rows the job holds in memory
    estimated: bool = False
    client_sizes: tuple[int, ...] = ()  # training samples of every client (the partition's summary; () when estimated)
    # rows that a model held by several clients scores once (fedbench.engine.evaluate): where the clients of a
    # cluster share one test set (FLT's partitions), each cluster's test rows once plus the validation rows;
    # None: eval_samples (no test row is shared, or a global test set, already counted once in eval_samples)
    shared_eval_samples: int | None = None


def summary_shape(summary: dict) -> CellShape:
    """The shape recorded in a partition's summary ``.json`` (a global test set, which every client
    lists, counts once: a model shared by the clients scores each distinct row once; where the clients
    of a cluster share one test set, ``shared_eval_samples`` counts each cluster's once)."""
    sizes = summary["train_client_sizes"]
    test = summary.get("test_samples", 0)
    val = summary.get("val_samples", 0)
    shared = None
    if summary.get("spec", {}).get("test_set") == "global":
        test //= max(summary["num_clients"], 1)
    elif "test" in summary.get("shared_parts", ()) and summary.get("groups", {}).get("cluster") and summary.get("test_client_sizes"):
        per_cluster: dict = {}  # each cluster's shared test set once (its first member's size)
        for cluster, size in zip(summary["groups"]["cluster"], summary["test_client_sizes"]):
            per_cluster.setdefault(cluster, size)
        shared = sum(per_cluster.values()) + val
    evaluated = test + val
    return CellShape(
        num_clients=summary["num_clients"], train_samples=sum(sizes), eval_samples=evaluated,
        largest_client=max(sizes, default=0), input_shape=tuple(summary["input_shape"]),
        num_classes=summary["num_classes"], dataset_samples=sum(sizes) + (evaluated if shared is None else shared),
        client_sizes=tuple(sizes), shared_eval_samples=shared,
    )


def estimated_shape(dataset: dict, partition: dict) -> CellShape:
    """The shape of a partition before it exists: clients from the partition entry (or its
    partitioner's default, or the dataset's users), samples from the dataset's registered facts (a
    dataset whose size depends on files or draws, FEMNIST's or Synthetic's: its ``samples_per_user``
    times its users, or its ``expected_users``), split as the partition splits them: its registered
    ``sizes`` where it splits the data itself (FeMAM's partitions: the official test set, validation
    from the training samples), else ``test_fraction`` of the samples and ``val_fraction`` of the rest;
    ``sample_fraction`` scales the data down.  ``ValueError`` for a dataset whose facts give no size."""
    from fedbench.data import DATASETS, PARTITIONERS
    from fedbench.data.partition import COMMON_KEYS
    from fedbench.data.sources import COMMON_KEYS as DATASET_KEYS

    source = dataset["source"]
    params = DATASETS.with_defaults(source, {k: v for k, v in dataset.items() if k not in DATASET_KEYS})
    facts = DATASETS.extra(source, "facts")(params)
    kind_params = PARTITIONERS.with_defaults(partition["kind"], {k: v for k, v in partition.items() if k not in COMMON_KEYS})
    clients = kind_params.get("num_clients") or kind_params.get("num_users") or facts.num_users
    samples = facts.num_samples
    if samples is None:
        if facts.samples_per_user is None:
            raise ValueError(f"dataset source {source!r}: its facts give neither num_samples nor samples_per_user")
        users = facts.num_users or facts.expected_users or clients or 1
        samples, clients = int(users * facts.samples_per_user), clients or int(users)
    if kind_params.get("samples_per_client") and clients:
        samples = min(samples, clients * kind_params["samples_per_client"])
    clients = int(clients or 1)
    sizes = PARTITIONERS.extra(partition["kind"], "sizes")
    sizes = sizes(kind_params, facts) if sizes else None
    if sizes:  # a partition that splits the data itself (FeMAM's: official test set, validation from training)
        train, val, test = sizes
        samples = train + val + test
    else:  # the generic split: test_fraction of each client's samples, then val_fraction of the rest
        samples = int(samples * kind_params.get("sample_fraction", 1.0))
        test_share = partition.get("test_fraction", 0.25)
        if partition.get("test_set") == "global":
            test_share = facts.test_samples / (facts.num_samples or samples) if facts.test_samples else GLOBAL_TEST_SHARE
        train = int(samples * (1 - test_share) * (1 - partition.get("val_fraction", 0.0)))
    return CellShape(
        num_clients=clients, train_samples=train, eval_samples=samples - train,
        largest_client=max(1, 2 * train // clients),  # a skewed partition's largest client: twice the mean
        input_shape=tuple(facts.input_shape or (1,)), num_classes=facts.num_classes,
        dataset_samples=samples, estimated=True,
    )

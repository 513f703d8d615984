"""The work of a run that its models' FLOPs do not count, at the device's measured rates in
``config/throughputs.yaml`` (each absent: not counted), as the algorithm's workload declares it:

* a one-off relatedness step, every client's training rows embedded by an encoder after its own
  fine-tuning (:func:`relatedness_seconds`, ``benchmarks/flt_relatedness.py``);
* the server's in-place average, every round (:func:`server_average_seconds`, ``benchmarks/flt_in_place_average.py``);
* a clustering: k-means, PCA and UMAP of the clients' signatures, or every round's k-means of the
  clients' models (:func:`clustering_seconds`, ``benchmarks/flt_clustering.py``).

Each reads the algorithm's declaration (``workload``) where its caller has not read it already
(:func:`fedbench.cost.estimate.cell_cost` reads it once).  The simultaneous average (each distinct row of the
graph once) is not counted."""

from __future__ import annotations

from fedbench.cost.model_flops import model_cost
from fedbench.cost.shape import CellShape
from fedbench.registry.workload import Workload, declared_workload


def relatedness_seconds(spec: dict, shape: CellShape, table: dict, device: str, workload: Workload | None = None) -> float:
    """The workload's relatedness step (``relatedness_finetune_epochs``; FLT's Algorithm 2 with an encoder
    signature): every client's training rows embedded, after that many epochs of each client's own fine-tuning,
    at the device's measured seconds per row (``flt_relatedness``: ``encode_s``, ``finetune_s`` an epoch)."""
    epochs = (workload or declared_workload(spec["algorithm"], spec["training"])).relatedness_finetune_epochs
    rates = table.get(device, {}).get("flt_relatedness")
    if epochs is None or not rates:
        return 0.0
    return shape.train_samples * (rates["encode_s"] + epochs * rates["finetune_s"])


def server_average_seconds(spec: dict, shape: CellShape, table: dict, device: str, workload: Workload | None = None) -> float:
    """The workload's in-place server average (``in_place_average``: FLT's released code), every round: each
    of the M clients' rows a float64 product of its M weights with all M models, 2 M^2 P multiply-adds over
    the model's P entries, at the device's measured ``flt_in_place_average_flop_s``."""
    rate = table.get(device, {}).get("flt_in_place_average_flop_s")
    if not rate or not (workload or declared_workload(spec["algorithm"], spec["training"])).in_place_average:
        return 0.0
    entries = model_cost(spec["model"], shape.input_shape, shape.num_classes).state_bytes / 4
    return spec["training"]["rounds"] * 2.0 * shape.num_clients**2 * entries / rate


def clustering_seconds(spec: dict, shape: CellShape, table: dict, device: str, workload: Workload | None = None) -> float:
    """Seconds of the workload's clustering (:class:`fedbench.registry.workload.Clustering`) at the device's
    measured ``flt_clustering`` figures:

    * every round's k-means of the M clients' flattened models (FedSEM as FLT's code): rounds x M x the
      model's entries x ``fesem_kmeans_s`` (a warm-started fit; the first round's restarts, about 3 s at
      FLT's MLP and 100 clients, are not counted);
    * every client's k-means of its signature rows (FLT's Algorithm 2 lines 10-12): training rows x k x
      restarts x ``kmeans_s``;
    * a PCA of every client's rows first (PCA+kM+HC): training rows x ``pca_s``;
    * UMAP of the M x k centres (FLT's Algorithm 2 line 16): M x k x ``umap_s``."""
    clustering = (workload or declared_workload(spec["algorithm"], spec["training"])).clustering
    rates = table.get(device, {}).get("flt_clustering")
    if clustering is None or not rates:
        return 0.0
    seconds = 0.0
    if clustering.model_kmeans:
        entries = model_cost(spec["model"], shape.input_shape, shape.num_classes).state_bytes / 4
        seconds += spec["training"]["rounds"] * shape.num_clients * entries * rates["fesem_kmeans_s"]
    k = clustering.signature_centres
    if k:
        seconds += shape.train_samples * k * clustering.restarts * rates["kmeans_s"]
    if clustering.signature_pca:
        seconds += shape.train_samples * rates["pca_s"]
    if clustering.centres_umap:
        seconds += shape.num_clients * k * rates["umap_s"]
    return seconds

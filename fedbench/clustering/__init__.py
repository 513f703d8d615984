"""Layer 4, client clustering: FLT's client relatedness FCR (Algorithm 2) and the PCA+kM+HC baseline."""

from fedbench.clustering.fcr import (
    FCRResult,
    client_centres,
    client_distances,
    code_client_order,
    cut_linkage,
    embed_centres,
    fcr,
    hierarchical_clusters,
    pca_signatures,
    relatedness,
    threshold_adjacency,
)

__all__ = [
    "FCRResult",
    "client_centres",
    "client_distances",
    "code_client_order",
    "cut_linkage",
    "embed_centres",
    "fcr",
    "hierarchical_clusters",
    "pca_signatures",
    "relatedness",
    "threshold_adjacency",
]

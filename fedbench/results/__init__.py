"""Tables and figures made from the runs' ``metrics.json`` / ``history.csv`` files and the partitions' summaries."""

from fedbench.results.tables import load_metrics, summarise, write_tables
from fedbench.results.figures import load_histories, plot_accuracy_curves, plot_partition_heatmap

__all__ = [
    "load_metrics",
    "summarise",
    "write_tables",
    "load_histories",
    "plot_accuracy_curves",
    "plot_partition_heatmap",
]

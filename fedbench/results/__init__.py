"""Tables, figures and the scorecard made from the runs' ``metrics.json`` / ``history.csv`` files and the partitions' summaries."""

from fedbench.results.tables import load_metrics, summarise, write_tables
from fedbench.results.figures import experiment_curves, load_histories, plot_partition_heatmap, plot_training_curves
from fedbench.results.scorecard import scorecard, write_scorecard

__all__ = [
    "load_metrics",
    "summarise",
    "write_tables",
    "load_histories",
    "experiment_curves",
    "plot_training_curves",
    "plot_partition_heatmap",
    "scorecard",
    "write_scorecard",
]

"""Layer 6, the results of finished runs: tables, figures and the scorecard made from the runs' ``metrics.json`` / ``history.csv`` files
and the partitions' summaries, one submodule each (``tables``, ``figures``, ``scorecard``, ...).

Nothing is imported here: planning a workflow reads ``published`` and ``papers`` only, and must not
pay for matplotlib and seaborn, which the figure modules import.
"""

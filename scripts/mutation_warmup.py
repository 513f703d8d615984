"""pytest plugin for the mutation run's ``fcr`` group: compile UMAP's numba code once, in mutmut's fork server.

mutmut (``process_isolation = "forkserver"``) starts one process that collects the tests and then
forks a child per mutant.  Numba compiles UMAP's kernels on their first call and keeps them in the
process's memory, so without this plugin every child compiled them again (10-23 s of CPU per
mutant, beyond mutmut's CPU limit: the group's mutants "timed out" and the score meant nothing).
Here the fork server fits one UMAP with the arguments of :func:`fedbench.clustering.fcr.embed_centres`
(float64 points, Euclidean metric, fixed seed) when pytest is configured, and every forked child
inherits the compiled kernels.  UMAP is called directly, not through the mutated library, so the
warm-up runs no mutant.
"""

from __future__ import annotations

_warmed = False


def pytest_configure(config) -> None:
    global _warmed
    if _warmed:  # children run pytest again in the same (forked) process image
        return
    _warmed = True
    import warnings

    import numpy as np
    import umap

    points = np.random.default_rng(0).normal(size=(60, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        umap.UMAP(n_neighbors=15, min_dist=0.1, metric="euclidean", n_components=2, random_state=42).fit_transform(points)

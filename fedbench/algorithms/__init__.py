"""FL algorithms behind an explicit name -> builder registry.

A builder takes the method's own hyper-parameters as keyword arguments and returns an
:class:`~fedbench.algorithms.base.Algorithm`.  Importing this package registers all of them.
"""

from fedbench.algorithms import cfl, fedavg, fesem, fesem_flt, flt, ifca, local, perfedavg, pfedme, pfedmt  # noqa: F401  (register the builders)
from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation

__all__ = ["ALGORITHMS", "Algorithm", "Federation"]

"""Layer 4, the algorithms: FL algorithms behind an explicit name -> builder registry.

A builder takes the method's own hyper-parameters as keyword arguments and returns an
:class:`~fedbench.algorithms.base.Algorithm`.  Importing this package registers all of them; the
registry itself lives below the algorithms (:mod:`fedbench.registry.algorithms`) and imports this
package on its first lookup, so config validation and provenance never import an algorithm module.
"""

from fedbench.algorithms import cfl, ditto, fedavg, fedrep, femam, fesem, fesem_flt, flt, ifca, local, perfedavg, pfedme, pfedmt  # noqa: F401  (register the builders)
from fedbench.algorithms import clusamp, fedasam, fedexp, fedgen, fedmr, fedmut  # noqa: F401  (FedMR and its baselines)
from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation

__all__ = ["ALGORITHMS", "Algorithm", "Federation"]

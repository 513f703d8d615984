"""Layer 0, the names: registries of builders with their parameter bounds (:mod:`.core`), the
algorithm registry as the layers below the algorithms see it (:mod:`.algorithms`), tuning search
spaces (:mod:`.search_space`), what an algorithm declares about its work (:mod:`.workload`),
evaluation protocols (:mod:`.protocols`) and plugins (:mod:`.plugins`).  Imports nothing of fedbench's but this package."""

from fedbench.registry.core import REGISTRIES, Range, Registry, UnknownNameError  # noqa: F401  (the names plugins import)

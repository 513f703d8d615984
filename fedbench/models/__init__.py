"""Model architectures, named as the papers name them, behind one registry."""

from fedbench.models.registry import MODELS, build_model
from fedbench.models import mlp  # noqa: F401  (registers mlp, mlr)

__all__ = ["MODELS", "build_model"]

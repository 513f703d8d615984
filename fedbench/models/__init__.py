"""Layer 1, the models: model architectures, named as the papers name them, behind one registry."""

from fedbench.models.registry import MODELS, build_model
from fedbench.models import mlp  # noqa: F401  (registers mlp, mlr)
from fedbench.models import flt  # noqa: F401  (registers mlp_dropout, leaf_cnn, lenet_cifar)
from fedbench.models import pfedme  # noqa: F401  (registers pfedme_cnn)
from fedbench.models import fedavg_cnn  # noqa: F401  (registers fedavg_cnn)
from fedbench.models import fedmr  # noqa: F401  (registers fedmr_cnn, fedmr_femnist_cnn)
from fedbench.models import resnet9  # noqa: F401  (registers resnet9)
from fedbench.models import resnet20  # noqa: F401  (registers resnet20)
from fedbench.models import vgg  # noqa: F401  (registers vgg16)
from fedbench.models import small_cnn  # noqa: F401  (registers small_cnn)

__all__ = ["MODELS", "build_model"]

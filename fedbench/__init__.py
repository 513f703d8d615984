"""fedbench: reproducible federated learning under structured non-IID data.

One package per concern, each importing only its own layer and those below (tests/test_architecture.py):
0 ``registry``, ``util``; 1 ``data``, ``models``; 2 ``engine``; 3 ``config``, ``cost``, ``tuning``;
4 ``algorithms``, ``clustering``; 5 ``run``, ``extension``; 6 ``results``; 7 ``planning``."""

from fedbench.util.moved import install as _install_moved_names

__version__ = "0.1.0"

_install_moved_names()  # the modules' names before the packages (fedbench.util.moved), for a transition

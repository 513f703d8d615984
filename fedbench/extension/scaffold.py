"""``python -m fedbench new algorithm NAME``: a plugin package for a new method, ready to edit.

It writes ``fedbench_NAME/`` with a ``pyproject.toml`` declaring the ``fedbench.plugins`` entry
point, the method's module (FedAvg with a server step size, a starting point that passes the
algorithm contract), its contract test and a config that runs it beside FedAvg on digits.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from fedbench.registry.algorithms import ALGORITHMS

PYPROJECT = '''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "fedbench-{name}"
version = "0.1.0"
description = "{title}: a fedbench plugin"
requires-python = ">=3.11"
dependencies = ["fedbench"]

[project.entry-points."fedbench.plugins"]
{name} = "{package}.{name}"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

MODULE = '''"""{title}: describe the method here (paper, equation or algorithm line).

Starting point written by ``python -m fedbench new algorithm {name}``: FedAvg whose server moves the
global model ``server_lr`` of the way to the clients' average (server_lr = 1 is FedAvg).  Edit
``round`` (and the state ``init`` returns); keep everything the method needs between rounds in the
state, which checkpoints save, and read only ``fed.data.train`` rows while training.  ``workload``
declares what a round trains (the cost model sizes the method's jobs by it; the contract checks it):
edit it with ``round``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.engine.weights import Weights, broadcast, shared


@dataclass(frozen=True)
class {cls}(Algorithm):
    server_lr: float

    @classmethod
    def workload(cls, params: dict, training: dict) -> Workload:
        """The sampled clients run ``local_epochs`` epochs each, as in FedAvg."""
        return Workload(local_passes=training["local_epochs"])

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {{"global": initial}}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()  # the round's shared sample stream, as every method's
        trained, loss = fed.train_clients(broadcast(state["global"], len(chosen)), chosen)
        average = fed.average(trained, chosen)
        step = {{k: w + self.server_lr * (average[k] - w) if w.is_floating_point() else average[k]
                for k, w in state["global"].items()}}
        return {{"global": step}}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return shared(state["global"], fed.num_clients)  # what each client is scored with

    def global_model(self, fed: Federation, state: dict) -> Weights | None:
        return state["global"]


@ALGORITHMS.register("{name}", bounds={{"server_lr": "(0, 1]"}})
def {name}(*, server_lr: float = 1.0) -> {cls}:
    """{title} with server step size ``server_lr``."""
    return {cls}(server_lr=server_lr)
'''

CONFTEST = '''"""Import the plugin from src/ when it is not installed."""

import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
'''

TEST = '''"""{title} against fedbench's algorithm contract (fedbench.extension.contract)."""

from fedbench.extension.contract import Case, check_algorithm


def test_{name}_passes_the_contract(tmp_path):
    check_algorithm(Case("{name}", plugins=("{package}.{name}",)), tmp_path).raise_for_failures()
'''

CONFIG = '''# {title} beside FedAvg on digits (10 clients, Dirichlet(0.3)), 20 rounds, 3 seeds:
#   snakemake --cores 2 --configfile config/tiny.yaml --replace-workflow-config   (from the fedbench checkout,
#   with this package installed or PYTHONPATH=<this folder>/src)
results: results/{name}
device: auto
seeds: [0, 1, 2]
plugins: [{package}.{name}]
datasets:
  digits: {{source: digits}}
partitions:
  dir0.3: {{kind: dirichlet, alpha: 0.3, num_clients: 10, test_fraction: 0.25}}
models:
  mlp: {{arch: mlp, hidden: [64]}}
algorithms:
  fedavg: {{method: fedavg}}
  {name}: {{method: {name}, server_lr: 1.0}}
experiments:
  default:
    training: {{rounds: 20, batch_size: 10, lr: 0.05, momentum: 0.5, eval_every: 2}}
    grid:
      - {{datasets: [digits], partitions: [dir0.3], models: [mlp], algorithms: [fedavg, {name}]}}
'''

README = '''# fedbench-{name}

{title} as a fedbench plugin.

```sh
pip install -e .                                  # registers the fedbench.plugins entry point
python -m fedbench.extension.contract {package}.{name}      # the algorithm contract, from a shell
pytest                                            # the same, as a test
```
'''


def new_algorithm(name: str, where: Path = Path(".")) -> Path:
    """Write the plugin package ``fedbench_{name}`` under ``where``; returns its folder."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ValueError(f"algorithm name {name!r}: use lower-case letters, digits and _ (a Python name)")
    if name in ALGORITHMS:
        raise ValueError(f"algorithm {name!r} is already registered; choose another name")
    package = f"fedbench_{name}"
    root = Path(where) / package
    if root.exists():
        raise ValueError(f"{root} already exists")
    fields = {"name": name, "package": package, "cls": "".join(p.title() for p in name.split("_")),
              "title": name.replace("_", " ").title()}
    files = {
        "pyproject.toml": PYPROJECT, "README.md": README, f"src/{package}/__init__.py": '"""{title}: a fedbench plugin."""\n',
        f"src/{package}/{name}.py": MODULE, "tests/conftest.py": CONFTEST, f"tests/test_{name}.py": TEST,
        "config/tiny.yaml": CONFIG,
    }
    for path, template in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(template.format(**fields))
    return root

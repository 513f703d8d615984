"""Import the plugin from this checkout's src/ when it is not installed (pip install -e . needs no help)."""

import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

"""Record a behaviour-preserving refactor in the code ledger (fedbench/run/code_ledger.py), so that results
finished before it stay fresh for ``make stale``::

    python scripts/record_code_ledger.py --before f15767b --note "issue 54: ..." \\
        --move fedbench/cost.py=fedbench/cost/estimate.py,fedbench/cost/shape.py ...

It hashes every code file provenance can record (``fedbench/**/*.py``, ``workflow/scripts/*.py``) at commit
``--before`` (from git) and in the work tree now, and takes where each removed file went from git's rename
detection and the ``--move`` arguments (``OLD=NEW[,NEW...]``; ``OLD=`` for a file whose code no job runs any
more).  A removed file with no destination is refused.  Recording asserts the tree now computes what the tree
at ``--before`` did: run the test suite and compare finished runs first."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LEDGER = REPO / "fedbench" / "run" / "code_ledger.json"


def digest(data: bytes) -> str:
    """As fedbench.run.provenance.file_hashes hashes a file."""
    return hashlib.sha256(data).hexdigest()[:16]


def is_code(path: str) -> bool:
    return path.endswith(".py") and (path.startswith("fedbench/") or path.startswith("workflow/scripts/"))


def tree_at(commit: str) -> dict[str, str]:
    listing = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", commit],
                             capture_output=True, text=True, check=True).stdout.split()
    return {path: digest(subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{path}"], capture_output=True,
                                        check=True).stdout) for path in listing if is_code(path)}


def tree_now() -> dict[str, str]:
    listing = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout.split()
    return {path: digest((REPO / path).read_bytes()) for path in listing if is_code(path) and (REPO / path).exists()}


def renames(commit: str) -> dict[str, list[str]]:
    """Whole-file moves git detects between ``commit`` and the work tree."""
    out = subprocess.run(["git", "-C", str(REPO), "diff", "-M50%", "--name-status", commit, "--"],
                         capture_output=True, text=True, check=True).stdout
    moved = {}
    for line in out.splitlines():
        status, *paths = line.split("\t")
        if status.startswith("R") and is_code(paths[0]):
            moved[paths[0]] = [paths[1]]
    return moved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit before the refactor")
    parser.add_argument("--note", required=True, help="what the refactor was")
    parser.add_argument("--move", action="append", default=[], help="OLD=NEW[,NEW...]: where a removed file's code went")
    args = parser.parse_args(argv)
    before, after = tree_at(args.before), tree_now()
    moved = renames(args.before)
    for spec in args.move:
        old, _, new = spec.partition("=")
        moved[old] = [path for path in new.split(",") if path]
    unknown = sorted(path for targets in moved.values() for path in targets if path not in after)
    missing = sorted(path for path in before if path not in after and path not in moved)
    if unknown or missing:
        sys.exit(f"record_code_ledger: destinations not in the tree: {unknown}; removed files without a destination "
                 f"(give --move OLD=NEW or OLD=): {missing}")
    entries = json.loads(LEDGER.read_text()) if LEDGER.exists() else []
    entries.append({"note": args.note, "before": before, "after": after,
                    "moved": {old: new for old, new in sorted(moved.items()) if new != [old]}})
    LEDGER.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    print(f"recorded: {len(before)} files before, {len(after)} after, {len(moved)} moved -> {LEDGER.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

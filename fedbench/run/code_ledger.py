"""Code changes that leave every result as it was, recorded so that finished results stay fresh.

Provenance (:mod:`fedbench.run.provenance`) hashes the code a job ran by file path.  A refactor that
moves, splits or renames modules without changing what they compute would otherwise make every finished
result stale.  The ledger (``code_ledger.json`` beside this module) holds one entry per such change: the
hash of every code file before it and after it, and where each file's code went (``moved``; a file that
kept its path is not listed).  Adding an entry asserts that the tree after computes what the tree before
did -- checked when it is recorded (``scripts/record_code_ledger.py``: the default suite to the last
digit, bit-identical runs, the test suite).

A recorded provenance written before an entry is read in the terms of the tree after it
(:func:`translate`): each file the record lists stands for its successors, as the entry left them if the
record's hash is the one before the change, else marked changed (the result was already out of date
before the refactor, and stays so under the new names)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

LEDGER = Path(__file__).with_name("code_ledger.json")


@dataclass(frozen=True)
class Equivalence:
    """One behaviour-preserving change of the code: file hashes ``before`` and ``after`` it and, for every
    file whose code went elsewhere, the files it went to (``moved``; an empty list: deleted, nothing ran it)."""

    note: str
    before: dict[str, str]
    after: dict[str, str]
    moved: dict[str, list[str]] = field(default_factory=dict)

    def successors(self, path: str) -> list[str]:
        """Where the code of ``path`` (a file of the tree before) is in the tree after."""
        if path in self.moved:
            return self.moved[path]
        return [path] if path in self.after else []

    def predates(self, files: dict[str, str]) -> bool:
        """Whether a record's ``files`` were written before this change: it lists a path the change removed, or
        a file at its hash before the change where the change edited it."""
        return any(path in self.before and (path not in self.after or self.before[path] == digest != self.after[path])
                   for path, digest in files.items())


@lru_cache(maxsize=1)
def ledger() -> tuple[Equivalence, ...]:
    """The recorded changes, oldest first (none without a ledger file)."""
    if not LEDGER.exists():
        return ()
    return tuple(Equivalence(**entry) for entry in json.loads(LEDGER.read_text()))


def translate(files: dict[str, str], entries: tuple[Equivalence, ...] | None = None) -> tuple[dict[str, str], dict[str, str] | None]:
    """A record's ``files`` (path -> hash) in the terms of the newest tree, and that tree's hashes (the baseline a
    file the record does not list is compared with: it came with a refactor), or ``(files, None)`` where no
    entry postdates the record.  A successor of a file whose recorded hash is not the one before the change is
    marked changed (a hash no file has)."""
    baseline = None
    for entry in ledger() if entries is None else entries:
        if not entry.predates(files):
            continue
        out = {path: digest for path, digest in files.items() if path not in entry.before}  # plugins, unknown files
        changed: dict[str, str] = {}
        for path, digest in files.items():
            if path in entry.before:
                for successor in entry.successors(path):
                    out[successor] = entry.after[successor]
                    if digest != entry.before[path]:
                        changed[successor] = f"changed before: {path}"
        files, baseline = {**out, **changed}, entry.after
    return files, baseline

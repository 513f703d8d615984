"""The code ledger (fedbench.run.code_ledger): a record written before a behaviour-preserving refactor is read
in the terms of the tree after it, and a file that was already out of date stays so under its new names."""

from __future__ import annotations

import json

from fedbench.run import code_ledger, provenance
from fedbench.run.code_ledger import Equivalence, translate

# a refactor: a.py split into pkg/a1.py and pkg/a2.py, b.py kept its path but its imports were rewritten,
# c.py untouched, d.py deleted (nothing runs it any more), pkg/__init__.py new
REFACTOR = Equivalence(
    note="hand-made",
    before={"a.py": "A", "b.py": "B", "c.py": "C", "d.py": "D"},
    after={"pkg/a1.py": "A1", "pkg/a2.py": "A2", "b.py": "B'", "c.py": "C", "pkg/__init__.py": "I"},
    moved={"a.py": ["pkg/a1.py", "pkg/a2.py"], "d.py": []},
)


def test_a_record_of_the_tree_before_reads_as_the_tree_after():
    files, baseline = translate({"a.py": "A", "b.py": "B", "c.py": "C", "d.py": "D"}, (REFACTOR,))
    assert files == {"pkg/a1.py": "A1", "pkg/a2.py": "A2", "b.py": "B'", "c.py": "C"}
    assert baseline is REFACTOR.after


def test_a_file_already_changed_before_the_refactor_marks_its_successors():
    files, _ = translate({"a.py": "old A", "b.py": "B", "plugin:p/m.py": "P"}, (REFACTOR,))
    assert files["pkg/a1.py"].startswith("changed before: a.py") and files["pkg/a2.py"] == files["pkg/a1.py"]
    assert files["b.py"] == "B'" and files["plugin:p/m.py"] == "P"  # a plugin's file passes through


def test_a_record_written_after_the_refactor_is_left_alone():
    after = {"pkg/a1.py": "A1", "b.py": "B'", "c.py": "C"}
    assert translate(after, (REFACTOR,)) == (after, None)
    assert translate({"c.py": "C"}, (REFACTOR,)) == ({"c.py": "C"}, None)  # untouched files: nothing to read


def test_changed_files_counts_only_what_the_job_runs_now(monkeypatch, tmp_path):
    """Through provenance.changed_files: fresh after the refactor; an edit since it, an old file's change
    that the job still runs, and a file added since are listed; an old change the job no longer runs is not."""
    now = {"pkg/a1.py": "A1", "b.py": "B'", "pkg/__init__.py": "I"}
    monkeypatch.setattr(provenance, "code_files", lambda roots, scripts=(): dict(now))
    ledger = tmp_path / "code_ledger.json"
    ledger.write_text(json.dumps([REFACTOR.__dict__]))
    monkeypatch.setattr(code_ledger, "LEDGER", ledger)
    code_ledger.ledger.cache_clear()
    try:
        old_record = {"code_files": {"a.py": "A", "b.py": "B", "d.py": "D"}}
        assert provenance.changed_files(old_record, []) == []
        assert provenance.changed_files({"code_files": {"a.py": "A", "b.py": "B", "d.py": "old D"}}, []) == []
        assert provenance.changed_files({"code_files": {"a.py": "old A", "b.py": "B"}}, []) == ["pkg/a1.py"]
        now["b.py"] = "edited since"
        now["new.py"] = "N"
        assert provenance.changed_files(old_record, []) == ["b.py", "new.py"]
    finally:
        code_ledger.ledger.cache_clear()

"""Record the numerics matrix's measured settings in the cost model's throughput table.

    python benchmarks/matrix_settings.py OUT/matrix.csv                       # gpu_check.sh's matrix and compile parts
    python benchmarks/matrix_settings.py OUT/console.txt --measured "2026-11-27, NVIDIA H200"   # their console lines

``benchmarks/numerics_matrix.py`` times every family at settings such as ``bf16+cl+compile`` (precision,
channels_last, cuDNN autotuning, compilation: ``fedbench.engine.numerics.Numerics.label``).  Each setting
other than ``fp32`` that ran ``ok`` becomes ``<device>.families.<family>.settings.<setting>`` in
``config/throughputs.yaml``: its training rate (``train``, FLOP/s), ``ms_per_round`` and where it was
``measured``; a setting measured twice keeps its fastest row.  The cost model trains a cell whose
``training`` asks for that setting at that rate (``fedbench.cost.rates.setting_rate``), and
``python -m fedbench.planning.cost_report --numerics SETTING`` estimates a whole grid so.  ``fp32`` rows are left
out: a family's own figure (``benchmarks/throughputs.py``) is its fp32 run, with evaluation measured
too.  A family the table does not have on the device is refused (measure its fp32 figure first).

The input is ``matrix.csv`` (its ``when`` and ``device`` columns say where each row was measured) or the
console output of ``gpu_check.sh`` (the device tool may bring back the console and not the CSV), whose
result lines ``<family> <setting> ok: <ms> ms/round, <TFLOP/s> TFLOP/s`` carry no date or device:
``--measured`` says them.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from fedbench.cost import THROUGHPUTS, device_kind  # noqa: E402
from fedbench.engine.numerics import Numerics  # noqa: E402
from throughputs import write_table  # noqa: E402

CONSOLE_ROW = re.compile(r"^\s*(?P<family>\w+) (?P<setting>[\w+]+)\s+ok: (?P<ms>[\d.]+) ms/round, (?P<tflops>[\d.]+) TFLOP/s")


def read_rows(path: Path, measured: str | None) -> list[dict]:
    """The ``ok`` rows of a matrix CSV or a console log: family, setting, ms_per_round, train (FLOP/s), measured."""
    text = path.read_text()
    if text.startswith("when,"):
        return [{"family": r["family"], "setting": r["setting"], "ms_per_round": float(r["ms_per_round"]),
                 "train": float(r["train_tflops"]) * 1e12, "measured": measured or f"{r['when'][:10]}, {r['device']}"}
                for r in csv.DictReader(text.splitlines()) if r["status"] == "ok"]
    if measured is None:
        raise SystemExit(f"{path}: a console log says no date or device: name them with --measured")
    return [{"family": m["family"], "setting": m["setting"], "ms_per_round": float(m["ms"]),
             "train": float(m["tflops"]) * 1e12, "measured": measured}
            for m in map(CONSOLE_ROW.match, text.splitlines()) if m]


def settings_by_family(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """Per family, per setting other than fp32 (checked by :meth:`Numerics.parse`): the fastest row."""
    out: dict[str, dict[str, dict]] = {}
    for row in rows:
        label = Numerics.parse(row["setting"]).label  # refuses a misspelt setting; one spelling per setting
        if label == "fp32":
            continue
        kept = out.setdefault(row["family"], {}).get(label)
        if kept is None or row["train"] > kept["train"]:
            out[row["family"]][label] = {"train": float(f"{row['train']:.4g}"), "ms_per_round": row["ms_per_round"],
                                         "measured": row["measured"]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="matrix.csv or a gpu_check.sh console log")
    p.add_argument("--measured", default=None, help="where and when (e.g. '2026-11-27, NVIDIA H200'); "
                                                     "a console log needs it, a CSV's own columns say it")
    p.add_argument("--device", default="cuda", help="the table's device block (cuda or cpu)")
    p.add_argument("--output", default=str(THROUGHPUTS), help="the throughput table, updated in place")
    args = p.parse_args(argv)
    found = settings_by_family(read_rows(Path(args.source), args.measured))
    if not found:
        raise SystemExit(f"{args.source}: no measured setting other than fp32")
    output, kind = Path(args.output), device_kind(args.device)
    table = yaml.safe_load(output.read_text())
    families = table.get(kind, {}).get("families") or {}
    missing = sorted(set(found) - set(families))
    if missing:
        raise SystemExit(f"{output}: no {kind} figure of {', '.join(missing)}: measure its fp32 run first "
                         "(benchmarks/throughputs.py)")
    for family, settings in found.items():
        families[family]["settings"] = {**(families[family].get("settings") or {}), **settings}
        print(f"{family:>10}: " + ", ".join(f"{s} {v['train'] / 1e12:.3g} TFLOP/s" for s, v in settings.items()))
    write_table(output, table)
    print(f"{sum(map(len, found.values()))} settings of {len(found)} families written to {output} under {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

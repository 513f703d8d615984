"""pytest plugin: one line per finished test, and each failure's traceback, appended to the file
``$FEDBENCH_REPORT_LOG`` as the results arrive (also from pytest-xdist workers), so that a run cut
off by a time limit still tells what failed and why.  ``pytest -p report_as_you_go`` with
``benchmarks/`` on the path (benchmarks/gpu_check.sh does both)."""

import os


def pytest_runtest_logreport(report):
    path = os.environ.get("FEDBENCH_REPORT_LOG")
    if not path or "PYTEST_XDIST_WORKER" in os.environ or (report.when != "call" and report.passed):
        return
    with open(path, "a") as log:
        log.write(f"{report.outcome.upper()} {report.when} {report.duration:.1f}s {report.nodeid}\n")
        if report.failed:
            log.write(report.longreprtext[-4000:] + "\n\n")

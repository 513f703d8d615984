"""``python -m fedbench.results.claims [--update] CONFIG... [--out reports/claims.md] [--note TEXT]``."""

from __future__ import annotations

from fedbench.results.published import load_published
from fedbench.results.claims.report import write_report

def main(argv: list[str]) -> None:
    """``python -m fedbench.results.claims [--update] CONFIG... [--out reports/claims.md] [--note TEXT]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedbench.results.claims",
                                     description="Write reports/claims.md from the runs on disk of the configs' claims.")
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="experiment config files with a claims: section")
    parser.add_argument("--update", action="store_true", help="rewrite only the sections of the papers these configs test")
    parser.add_argument("--out", default="reports/claims.md", help="the report (default: %(default)s)")
    parser.add_argument("--note", default="", help="a paragraph under each written section's heading")
    args = parser.parse_args(argv)
    table = write_report(args.configs, args.out, load_published(), args.note, update=args.update)
    print(table[["claim", "setting", "verdict", "seeds"]].to_string())


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

"""``python -m fedbench``: ``new algorithm NAME`` (a plugin package, :mod:`fedbench.extension.scaffold`) and
``contract TARGET`` (the algorithm contract, :mod:`fedbench.extension.contract`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["contract"]:
        from fedbench.extension.contract import main as contract

        return contract(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m fedbench", description="fedbench's own commands "
                                     "(python -m fedbench contract --help: the algorithm contract)")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="write a plugin package skeleton")
    new.add_argument("kind", choices=["algorithm"])
    new.add_argument("name", help="the algorithm's registered name, e.g. fedavgm")
    new.add_argument("--dir", type=Path, default=Path("."), help="where to write fedbench_NAME/ (default: here)")
    commands.add_parser("contract", help="check an algorithm against the contract")
    args = parser.parse_args(argv)
    from fedbench.extension.scaffold import new_algorithm

    try:
        root = new_algorithm(args.name, args.dir)
    except ValueError as error:
        print(f"fedbench new: {error}", file=sys.stderr)
        return 2
    module = f"fedbench_{args.name}.{args.name}"
    print(f"wrote {root}: edit src/fedbench_{args.name}/{args.name}.py, then\n"
          f"  cd {root} && pip install -e . && python -m fedbench.extension.contract {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

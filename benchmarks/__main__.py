"""`python -m benchmarks <command>`: fit (calibration), accuracy (held-out cost-model error), speed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import accuracy, fit, speed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    commands = parser.add_subparsers(dest="command", required=True)
    fit_parser = commands.add_parser("fit", help="fit the calibration to ../shared/calibration")
    fit_parser.add_argument("--write", action="store_true", help="write costmodel/data/calibration/default.yaml")
    accuracy_parser = commands.add_parser("accuracy", help="leave-group-out error of TTFT and TPOT")
    accuracy_parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    accuracy_parser.add_argument("--markdown", action="store_true", help="also print markdown tables")
    speed_parser = commands.add_parser("speed", help="cost-model evaluations per second")
    speed_parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args(argv)
    if args.command == "speed":
        return speed.main(args.count)
    if args.command == "fit":
        return fit.main(write=args.write)
    return accuracy.main(json_out=args.json, markdown=args.markdown)


if __name__ == "__main__":
    sys.exit(main())

"""`python -m benchmarks <command>`: fit (calibration), accuracy (held-out cost-model error), ceiling (the
held-out-engine error with the engine's own factors), published (against published figures), speed,
solver (front quality and time against a baseline), scaling (time and memory against size), own-calibration
(what calibrating on one's own runs buys, campaign by campaign), expected-error (the held-out figures
`plan solve` and `plan evaluate` quote, packaged), repeatability (how far repeated runs lie apart)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks import (
    accuracy,
    ceiling,
    expected_error,
    fit,
    own_calibration,
    published,
    repeatability,
    scaling,
    solver,
    speed,
)
from benchmarks.crossval import usable_cpus
from benchmarks.measurements import GROUP_KEYS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    commands = parser.add_subparsers(dest="command", required=True)
    fit_parser = commands.add_parser("fit", help="fit the calibration to ../shared/calibration")
    fit_parser.add_argument("--write", action="store_true", help="write costmodel/data/calibration/default.yaml")
    accuracy_parser = commands.add_parser("accuracy", help="leave-group-out error of TTFT and TPOT")
    accuracy_parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    accuracy_parser.add_argument("--markdown", action="store_true", help="also print markdown tables")
    accuracy_parser.add_argument("--jobs", type=int, default=usable_cpus(),
                                 help="processes the folds' fits share (default: the CPUs this process may run "
                                      "on; the same figures)")
    accuracy_parser.add_argument("--keys", nargs="+", choices=GROUP_KEYS, default=list(accuracy.KEYS),
                                 help="what is held out in turn (default: model, system, engine, serving)")
    ceiling_parser = commands.add_parser("ceiling", help="held-out error with the engines' own values of some factors")
    ceiling_parser.add_argument("--factors", default=",".join(ceiling.TTFT_FIELDS),
                                help="engine factors the held-out rows' engines keep (comma-separated)")
    ceiling_parser.add_argument("--key", choices=GROUP_KEYS, default="engine", help="what is held out in turn")
    commands.add_parser("published", help="the calibration against published serving figures (never fitted)")
    commands.add_parser("repeatability", help="how far repeated runs of one configuration lie apart (accuracy's floor)")
    expected_parser = commands.add_parser("expected-error", help="the held-out figures plan solve quotes, packaged")
    expected_parser.add_argument("--write", action="store_true",
                                 help="write costmodel/data/calibration/expected_error.yaml")
    own_parser = commands.add_parser("own-calibration", help="error on half of each campaign, calibrated on the other")
    own_parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    speed_parser = commands.add_parser("speed", help="cost-model evaluations per second")
    speed_parser.add_argument("--count", type=int, default=10_000)
    solver_parser = commands.add_parser("solver", help="front quality and solve time against the baseline")
    solver_parser.add_argument("--suite", choices=["quick", "fleet", "full"], default="quick")
    solver_parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    solver_parser.add_argument("--write-baseline", action="store_true", help="record this run as the baseline")
    solver_parser.add_argument("--backends", nargs="+", choices=solver.BACKENDS, default=list(solver.BACKENDS))
    solver_parser.add_argument("--seeds", type=int, default=3)
    solver_parser.add_argument("--time-limit", type=float, default=120.0, help="per solve, s")
    solver_parser.add_argument("--jobs", type=int, default=1, help="cases run in parallel (timing noise if > 1)")
    solver_parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    solver_parser.add_argument("--log", type=Path, help="append each case here as it ends; resume from it")
    solver_parser.add_argument("--points", help="every scenario's search.front_points (a number, or all)")
    solver_parser.add_argument("--batch-tolerance", type=float, help="every scenario's search.batch_tolerance")
    scaling_parser = commands.add_parser("scaling", help="solve time and memory against GPUs and experts")
    scaling_parser.add_argument("--time-limit", type=float, default=300.0)
    scaling_parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "solver":
        search: dict[str, object] = {}
        if args.points is not None:
            search["front_points"] = args.points if args.points == "all" else int(args.points)
        if args.batch_tolerance is not None:
            search["batch_tolerance"] = args.batch_tolerance
        return solver.main(args.suite, args.json, args.write_baseline, tuple(args.backends), args.seeds,
                           args.time_limit, args.jobs, args.markdown, args.log, search)
    if args.command == "scaling":
        return scaling.main(args.time_limit, args.jobs)
    if args.command == "speed":
        return speed.main(args.count)
    if args.command == "ceiling":
        try:
            fields = ceiling.check_fields(args.factors.split(","))
        except ValueError as error:
            parser.error(f"--factors: {error}")  # exit code 2, before any fitting
        return ceiling.main(fields, args.key)
    if args.command == "own-calibration":
        return own_calibration.main(args.json)
    if args.command == "published":
        return published.main()
    if args.command == "repeatability":
        return repeatability.main()
    if args.command == "expected-error":
        return expected_error.main(write=args.write)
    if args.command == "fit":
        return fit.main(write=args.write)
    return accuracy.main(json_out=args.json, markdown=args.markdown, keys=tuple(args.keys), jobs=args.jobs)


if __name__ == "__main__":
    sys.exit(main())

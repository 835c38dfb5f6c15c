"""Run a study's cases: locally in a process pool, or on Ray (one task per case), resumably.

Each case is solved as `plan solve` would (the scenario's own `search` settings) by `solve_case`, a plain
function of JSON in and JSON out, so a pool worker and a Ray task run the same code and give the same
answer. Results go to `CACHE/<hash>.json` as each case finishes (written to a temporary file and renamed:
an interrupt never leaves half a result), and a case whose file is there is not solved again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import multiprocessing
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner import __version__, interrupt
from planner.errors import InfeasibleError, InputError, NoSolutionInTimeError
from planner.finite import dumps
from planner.studies.study import Case

# Keys of `plan solve`'s JSON kept per case: the figures and layouts, not the placement of every instance
# and the expert banks (`plan solve` of the case's scenario gives those, figure for figure).
_DROPPED_POINT_KEYS = ("placement", "kv_tiers", "midfill")
_DROPPED_KEYS = ("expert_banks",)


@dataclass(frozen=True)
class CaseResult:
    """What one case gave: `solved` (with its front), `infeasible`, `no_solution` or `error`."""

    case: Case
    status: str
    message: str | None
    time_s: float
    result: dict[str, Any] | None
    cached: bool = False

    def to_record(self) -> dict[str, Any]:
        record = {"hash": self.case.hash, "planner_version": __version__, "scenario": self.case.scenario,
                  "status": self.status, "message": self.message, "time_s": round(self.time_s, 3),
                  "result": self.result}
        return record | {"sha256": _checksum(record)}


def _checksum(record: dict[str, Any]) -> str:
    """SHA-256 of a record's content (less its checksum): an edited or truncated record is solved again."""
    content = {key: value for key, value in record.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def solve_case(scenario: dict[str, Any], base_dir: str | None,
               calibration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Solve one case's scenario (priced with `calibration`, as JSON, where given): `{status, message, time_s,
    result, planner_version}`. Expected failures (infeasible, no solution in time) are results; anything else
    is an `error` with its traceback."""
    from costmodel.calibration import Calibration
    from planner.api import solve
    from planner.scenario import scenario_from_data

    start = time.perf_counter()
    status, message, result = "solved", None, None
    try:
        front = solve(scenario_from_data(scenario, None if base_dir is None else Path(base_dir)),
                      calibration=None if calibration is None else Calibration.model_validate(calibration))
        result = _slim(front.to_dict())
    except InfeasibleError as exc:
        status, message = "infeasible", str(exc)
    except NoSolutionInTimeError as exc:
        status, message = "no_solution", str(exc)
    except InputError as exc:
        status, message = "input_error", str(exc)
    except Exception as exc:  # a bug: the sweep goes on and reports it
        status, message = "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
    return {"status": status, "message": message, "time_s": time.perf_counter() - start, "result": result,
            "planner_version": __version__}


def _slim(data: dict[str, Any]) -> dict[str, Any]:
    data = {k: v for k, v in data.items() if k not in _DROPPED_KEYS}
    data["front"] = [{k: v for k, v in p.items() if k not in _DROPPED_POINT_KEYS} for p in data["front"]]
    return data


def _worker_init() -> None:
    """Pool workers stop at Ctrl-C (with the rest of the terminal's process group) or at their parent's
    SIGTERM as `plan` does, their solvers' processes and temporary files with them, without a message of their
    own (the parent reports the interrupt)."""
    interrupt.install(quiet=True)
    logging.getLogger().setLevel(logging.WARNING)


@dataclass
class Executor:
    """Where cases run: `local` (a process pool of `jobs` workers) or `ray` (a Ray cluster at `address`,
    or a local Ray instance of `jobs` CPUs when there is none)."""

    kind: str = "local"
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    address: str | None = None

    def describe(self) -> str:
        if self.kind == "local":
            return f"local process pool, {self.jobs} worker{'s' if self.jobs > 1 else ''}"
        return f"Ray cluster at {self.address}" if self.address else f"local Ray instance, {self.jobs} CPUs"


Payload = tuple[dict[str, Any], str | None, dict[str, Any] | None]  # scenario, base_dir, calibration


def _local(payloads: dict[str, Payload], jobs: int) -> Iterator[tuple[str, dict[str, Any]]]:
    context = multiprocessing.get_context("spawn")  # no fork of a process holding solver threads
    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(payloads))), mp_context=context,
                               initializer=_worker_init)

    def kill_workers() -> None:  # an interrupt of this process alone: its workers stop too, cleaning up as it does
        for process in list(getattr(pool, "_processes", {}).values()):
            with contextlib.suppress(Exception):
                process.terminate()

    interrupt.on_interrupt(kill_workers)
    try:
        futures: dict[Future[dict[str, Any]], str] = {
            pool.submit(solve_case, *payload): key for key, payload in payloads.items()}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: futures[f]):
                yield futures[future], future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray(payloads: dict[str, Payload], jobs: int, address: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        import ray
    except ImportError:
        raise InputError.single(None, None, "--ray", "Ray is not installed: pip install 'moe-planner[ray]'") from None
    if address:
        _reachable(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError.single(None, None, "--ray", f"cannot reach a Ray cluster at {address} ({exc}); start "
                                    "one (ray start --head) or leave the address out for a local instance") from None
    else:
        ray.init(num_cpus=jobs, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    interrupt.on_interrupt(ray.shutdown)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(solve_case)  # one task per case, one CPU each
        refs = {task.remote(*payload): key for key, payload in payloads.items()}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield refs[ref], ray.get(ref)
    finally:
        ray.shutdown()


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A `host:port` or `ray://host:port` address answers, or an InputError at once (Ray itself keeps
    retrying an address that does not answer for minutes). `auto` is Ray's to resolve."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise InputError.single(None, None, "--ray", f"nothing answers at {address} ({exc.strerror or exc}); start a "
                                "Ray cluster there (ray start --head) or leave the address out for a local "
                                "instance") from None


def run_cases(cases: tuple[Case, ...], executor: Executor, cache: Path | None,
              on_result: Callable[[CaseResult, int, int], None] | None = None) -> list[CaseResult]:
    """Every case's result, in case order: from `cache` where it holds one, else solved by `executor`
    (and stored in `cache` as soon as it finishes). `on_result(result, done, total)` after each case."""
    results: dict[str, CaseResult] = {}
    unique = {case.hash: case for case in cases}  # equal scenarios are solved once
    for key, case in unique.items():
        record = read_record(cache, key) if cache is not None else None
        if record is not None:
            results[key] = CaseResult(case, record["status"], record["message"], record["time_s"],
                                      record["result"], cached=True)
    done = 0
    for result in results.values():
        done += 1
        if on_result is not None:
            on_result(result, done, len(unique))
    payloads = {key: (case.scenario, case.base_dir, case.calibration) for key, case in unique.items()
                if key not in results}
    if payloads and cache is not None:
        interrupt.on_interrupt(lambda: _kept(cache))
    if payloads:
        run = _local(payloads, executor.jobs) if executor.kind == "local" else _ray(payloads, executor.jobs,
                                                                                     executor.address)
        for key, answer in run:
            if answer["planner_version"] != __version__:
                answer = {**answer, "status": "error", "result": None,
                          "message": f"the worker runs moe-planner {answer['planner_version']}, this driver "
                          f"{__version__}: install the same version on the cluster"}
            result = CaseResult(unique[key], answer["status"], answer["message"], answer["time_s"],
                                answer["result"])
            if cache is not None and result.status != "error":  # an error (a bug) is tried again next time
                write_record(cache, result)
            results[key] = result
            done += 1
            if on_result is not None:
                on_result(result, done, len(unique))
    return [replace(results[case.hash], case=case) for case in cases]


def _kept(cache: Path) -> None:
    """On an interrupt: what stays for the next run."""
    kept = len(list(cache.glob("*.json"))) if cache.is_dir() else 0
    sys.stderr.write(f"kept {kept} finished cases in {cache}: rerun the same command to resume (the tables are "
                     "written when every case has run)\n")


def read_record(cache: Path, key: str) -> dict[str, Any] | None:
    """A finished case's record, or None (absent, unreadable, from another planner version, or changed since it
    was written: its checksum)."""
    path = cache / f"{key}.json"
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("hash") != key or record.get("planner_version") != __version__:
        return None
    return record if record.get("sha256") == _checksum(record) else None


def write_record(cache: Path, result: CaseResult) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / f"{result.case.hash}.json"
    partial = cache / f".{result.case.hash}.json.partial"
    partial.write_text(dumps(result.to_record()) + "\n", encoding="utf-8")
    os.replace(partial, final)

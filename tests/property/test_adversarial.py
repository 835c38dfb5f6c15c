"""The adversarial corpus of issue 14 (`tests/property/adversarial/`, made by its `make_corpus.py`): every file
gets exit 2 with its location and what to change, exit 3 naming the real binding resource, or a correct
result; never a traceback, exit 1 or 134, or a hang. Beside it: files that cannot be committed (/dev/zero, a
FIFO, a folder, an oversized file), `--cases` poison lines, CLI bounds, `--out` checks and SIGINT."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from costmodel.safe_load import MAX_FILE_BYTES
from planner import out_dir
from planner.out_dir import OutputFolder
from tests.helpers import run_cli

CORPUS = Path(__file__).parent / "adversarial"
REPO = Path(__file__).resolve().parents[2]
QUICK_SCENARIO = REPO / "scenarios" / "deepseek-v3-8xh200.yaml"
SLOW_SCENARIO = REPO / "scenarios" / "deepseek-v3-16x-gb200-nvl72.yaml"

# file -> (command, exit code, phrase the message must hold)
EXPECTED: dict[str, tuple[str, int, str]] = {
    "complex-key.yaml": ("validate", 2, ":1: not valid YAML: a mapping key must be a plain name"),
    "complex-key-in-cluster.yaml": ("validate", 2, ":5: not valid YAML: a mapping key must be a plain name"),
    "deep-flow-list.yaml": ("validate", 2, "nested deeper than 64 levels"),
    "deep-flow-mapping.yaml": ("validate", 2, "nested deeper than 64 levels"),
    "deep-block-mapping.yaml": ("validate", 2, ":64: not valid YAML: nested deeper than 64 levels"),
    "alias-bomb-name.yaml": ("validate", 2, "aliases expand the document by 8,335,593,937 nodes"),
    "alias-bomb-search-tp.yaml": ("validate", 2, "aliases expand the document"),
    "alias-bomb-layout.yaml": ("validate", 2, "aliases expand the document"),
    "alias-self-reference.yaml": ("validate", 2, "an alias refers to a node that contains it"),
    "model-alias-bomb.yaml": ("validate", 2, "aliases expand the document"),
    "non-utf8-byte.yaml": ("validate", 2, ":2: byte 0xe9 at column 10 is not UTF-8"),
    "int-5000-digits.yaml": ("validate", 2, "more digits than Python reads"),
    "empty.yaml": ("validate", 2, "found an empty file"),
    "scalar-document.yaml": ("validate", 2, "must be a YAML mapping of fields, found int"),
    "model-nosuchuser.yaml": ("validate", 2, "model: unknown model '~nosuchuser/config.json'"),
    "model-long-path.yaml": ("validate", 2, "model: unknown model"),
    "model-long-components.yaml": ("validate", 2, "model: unknown model"),
    "model-dev-zero.yaml": ("validate", 2, "model: unknown model '/dev/zero'"),
    "model-hf-huge-layers.yaml": ("validate", 2, "num_hidden_layers must be an integer from 1 to 512"),
    "model-hf-zero-experts.yaml": ("validate", 2, "num_local_experts must be an integer from 1"),
    "model-hf-kv-heads-5.yaml": ("validate", 2, "does not divide the 32 query heads"),
    "model-hf-top-k-200.yaml": ("validate", 2, "num_experts_per_tok is 200, more than the 8 routed experts"),
    "model-hf-dup-key.yaml": ("validate", 2, 'the key "num_experts_per_tok" appears twice in one object'),
    "model-hf-nan.yaml": ("validate", 2, "NaN is not a number JSON allows"),
    "model-hf-deep.yaml": ("validate", 2, "nested too deeply"),
    "model-yaml-alias-bomb.yaml": ("validate", 2, "aliases expand the document"),
    "hf-huge-layers.json": ("import-hf", 2, "num_hidden_layers must be an integer from 1 to 512"),
    "hf-zero-experts.json": ("import-hf", 2, "num_local_experts must be an integer from 1"),
    "hf-kv-heads-5.json": ("import-hf", 2, "num_key_value_heads is 5"),
    "hf-huge-hidden.json": ("import-hf", 2, "hidden_size must be an integer from 1 to 1,048,576"),
    "hf-nan.json": ("import-hf", 2, "NaN is not a number JSON allows"),
    "hf-deep.json": ("import-hf", 2, "nested too deeply"),
    "gpus-1e30.yaml": ("validate", 2, "cluster.gpus: Input should be less than or equal to 32768"),
    "gpus-1000000.yaml": ("validate", 2, "cluster.gpus: Input should be less than or equal to 32768"),
    "nodes-1e30.yaml": ("validate", 2, "cluster.nodes"),
    "racks-5000.yaml": ("validate", 2, "cluster.racks: 360000 GPUs is more than the 32768"),
    "gpus-inf.yaml": ("validate", 2, "cluster.gpus"),
    "gpus-1e400.yaml": ("validate", 2, "cluster.gpus"),
    "seed-2-31.yaml": ("validate", 2, "search.seed: Input should be less than or equal to 2147483647"),
    "threads-1e30.yaml": ("validate", 2, "search.threads: Input should be less than or equal to 256"),
    "threads-100000.yaml": ("validate", 2, "search.threads: Input should be less than or equal to 256"),
    "redundant-experts-1e8.yaml": ("validate", 2, "search.redundant_experts"),
    "redundant-experts-1000.yaml": ("validate", 2, "1000 redundant slots is more than the 256 routed experts"),
    "redundant-experts-float.yaml": ("validate", 2, "search.redundant_experts"),
    "tp-list-1000.yaml": ("validate", 2, "search.tp: List should have at most 32 items"),
    "time-limit-inf.yaml": ("validate", 2, "search.time_limit_s: Input should be a finite number"),
    "max-batch-1e30.yaml": ("validate", 2, "search.max_batch"),
    "schema-version-true.yaml": ("validate", 2, "schema_version is the whole number 1, not true"),
    "schema-version-float.yaml": ("validate", 2, "schema_version is the whole number 1, not 1.0"),
    "name-too-long.yaml": ("validate", 2, "name: String should have at most 200 characters"),
    "input-tokens-1e30.yaml": ("validate", 2, "workload.input_tokens"),
    "input-tokens-nan.yaml": ("validate", 2, "workload.input_tokens"),
    "arrival-rate-subnormal.yaml": ("validate", 2, "workload.arrival_rate_per_s"),
    "concurrency-1e30.yaml": ("validate", 2, "workload.concurrency"),
    "prefix-hit-rate-1.yaml": ("validate", 2, "prefix_hit_rate 1 of 1024 input tokens leaves 0 to compute"),
    "think-time-inf.yaml": ("validate", 2, "workload.sessions.think_time_s: Input should be a finite number"),
    "think-time-1e308.yaml": ("validate", 2, "workload.sessions.think_time_s: Input should be less than"),
    "pause-nan.yaml": ("validate", 2, "workload.sessions.pause_s: Input should be a finite number"),
    "turns-1e9.yaml": ("validate", 2, "workload.sessions.turns"),
    "slo-ttft-inf.yaml": ("validate", 2, "slo.ttft_ms: Input should be a finite number"),
    "hbm-bandwidth-1e-300.yaml": ("validate", 2, "hbm_bandwidth_bytes_per_s must lie between 1e+06 and 1e+15"),
    "hbm-capacity-neg-inf.yaml": ("validate", 2, "cluster.overrides.hbm_capacity_bytes"),
    "latency-1e308.yaml": ("validate", 2, "network_latency_s must lie between 1e-09 and 1"),
    "flops-override-inf.yaml": ("validate", 2, "cluster.overrides.peak_flops_per_s.fp8: Input should be a finite"),
    "flops-override-unknown-format.yaml": ("validate", 2, "unknown compute format 'fp6'"),
    "kv-store-inf.yaml": ("validate", 2, "cluster.kv_store.capacity_bytes: Input should be a finite number"),
    "ok-flops-override.yaml": ("validate", 0, "valid scenario"),
    "ok-extreme-sessions.yaml": ("validate", 0, "valid scenario"),
    "layout-batch-1e30.yaml": ("validate", 2, "pools.0.batch"),
    "layout-batch-inf.yaml": ("validate", 2, "pools.0.batch"),
    "layout-replicas-1e30.yaml": ("validate", 2, "pools.0.replicas"),
    "layout-schema-version-true.yaml": ("validate", 2, "schema_version is the whole number 1, not true"),
    "layout-complex-key.yaml": ("validate", 2, "a mapping key must be a plain name"),
    "ok-layout.yaml": ("validate", 0, "valid layout"),
    "infeasible-long-context-2xh100.yaml": ("solve", 3, "KV cache: one sequence of 1,001,000 tokens needs"),
    "infeasible-disaggregated-1gpu.yaml": ("solve", 3, "GPUs: disaggregated serving needs a prefill and a decode"),
}
NOT_CASES = {"make_corpus.py", "cases-poison.jsonl", "README.md", "__pycache__"}


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_every_corpus_file_is_checked() -> None:
    files = {path.name for path in CORPUS.iterdir()} - NOT_CASES
    unchecked = files - set(EXPECTED) - {"hf-nan.json", "hf-deep.json", "hf-huge-layers.json",
                                         "hf-zero-experts.json", "hf-kv-heads-5.json", "hf-huge-hidden.json",
                                         "hf-top-k-200.json", "hf-dup-key.json"}
    assert not unchecked, f"corpus files without an expectation: {sorted(unchecked)}"
    assert len(EXPECTED) >= 70


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_case(name: str) -> None:
    command, code, phrase = EXPECTED[name]
    started = time.perf_counter()
    result = run_cli(command, str(CORPUS / name))
    assert time.perf_counter() - started < 10.0, f"{name} took too long"
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert result.code == code, result.err
    assert phrase in (result.err if code else result.out), result.err or result.out
    if code == 2:
        assert result.err.startswith(f"error: {CORPUS / name}") or result.err.startswith("error: "), result.err


@pytest.mark.parametrize("make", ["dev-zero", "fifo", "folder", "oversized"])
def test_files_that_are_not_documents_exit_2(make: str, tmp_path: Path) -> None:
    if make == "dev-zero":
        path = Path("/dev/zero")
        if not path.exists():
            pytest.skip("no /dev/zero")
    elif make == "fifo":
        path = tmp_path / "fifo.yaml"
        os.mkfifo(path)
    elif make == "folder":
        path = tmp_path
    else:
        path = tmp_path / "big.yaml"
        path.write_bytes(b"# " + b"x" * MAX_FILE_BYTES + b"\n")
    for command in (["validate"], ["evaluate", "--cases"], ["import-hf"]):
        result = run_cli(*command, str(path))
        assert result.code == 2 and "Traceback" not in result.err, (command, result.err)
        assert result.err.startswith(f"error: {path}"), result.err


def test_cases_isolate_every_poison_line() -> None:
    result = run_cli("evaluate", "--cases", str(CORPUS / "cases-poison.jsonl"))
    assert result.code == 0, result.err
    lines = [_strict_json(line) for line in result.out.splitlines()]
    assert [line["line"] for line in lines] == list(range(1, 19))
    good = [line["line"] for line in lines if "error" not in line]
    assert good == [1, 17, 18], [line for line in lines if line["line"] not in good][:3]
    assert lines[0]["ttft_ms"] == lines[17]["ttft_ms"]  # a poison line leaves no trace on later lines
    errors = {line["line"]: line["error"] for line in lines if "error" in line}
    assert "nested too deeply" in errors[2]
    assert "unknown model" in errors[3] and "unknown model" in errors[4]
    assert "not UTF-8" in errors[6]
    assert "too large for a float" in errors[7] and "not a number JSON allows" in errors[8]
    assert "hbm_bandwidth_bytes_per_s must lie between" in errors[10]


@pytest.mark.parametrize(("option", "value"), [("--seed", "2147483648"), ("--seed", "-1"), ("--threads", "100000"),
                                                ("--threads", "0")])
def test_solver_options_out_of_range_exit_2(option: str, value: str) -> None:
    result = run_cli("solve", str(QUICK_SCENARIO), option, value)
    assert result.code == 2 and "Traceback" not in result.err, result.err


def test_unwritable_out_exits_2_before_solving(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    started = time.perf_counter()
    result = run_cli("solve", str(QUICK_SCENARIO), "--out", str(blocker / "front"))
    assert result.code == 2 and "--out: cannot write files there" in result.err, result.err
    assert time.perf_counter() - started < 1.5, "the solve ran before --out was checked"


def test_out_replaces_an_earlier_front_and_every_json_output_is_strict(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for index in range(200):  # a longer, older front
        (out / f"plan-{index}.yaml").write_text("stale\n")
    (out / "notes.txt").write_text("mine\n")
    result = run_cli("solve", str(QUICK_SCENARIO), "--format", "json", "--out", str(out))
    assert result.code == 0, result.err
    front = _strict_json(result.out)["front"]
    plans = sorted(path.name for path in out.glob("plan-*.yaml"))
    assert plans == sorted(f"plan-{index}.yaml" for index in range(len(front)))
    assert all("stale" not in (out / name).read_text() for name in plans)
    assert (out / "notes.txt").read_text() == "mine\n"
    assert not [path for path in out.iterdir() if path.name.startswith(".plan-out-")]  # no staging left
    assert _strict_json((out / "front.json").read_text())["front"] == front


@pytest.mark.parametrize("args", [["catalog", "--format", "json"], ["show", "model", "kimi-k2", "--format", "json"],
                                  ["show", "system", "gb200-nvl72", "--format", "json"], ["schema", "scenario"],
                                  ["schema", "layout"]])
def test_json_outputs_are_strict(args: list[str]) -> None:
    result = run_cli(*args)
    assert result.code == 0, result.err
    _strict_json(result.out)


def test_evaluate_json_is_strict() -> None:
    layout = REPO / "scenarios" / "deepseek-v3-8xh200.layout.yaml"
    result = run_cli("evaluate", str(QUICK_SCENARIO), "--layout", str(layout), "--format", "json")
    assert result.code == 0, result.err
    _strict_json(result.out)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_solve_and_writes_nothing(tmp_path: Path, signum: int, code: int) -> None:
    """Ctrl-C exits 130, SIGTERM (schedulers, kill) 143; neither leaves `--out` nor its staging folder."""
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "planner", "solve", str(SLOW_SCENARIO), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    time.sleep(4.0)  # past start-up and candidate generation, into the MILP sweep on this machine
    if process.poll() is not None:
        pytest.skip("the solve finished before it could be interrupted")
    process.send_signal(signum)
    try:
        _, err = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("plan did not stop within 10 s of the signal")
    assert process.returncode == code, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert not out.exists(), list(out.iterdir())
    assert not list(tmp_path.glob(".plan-out-*")), "the staging folder is left behind"


def test_import_hf_to_an_unwritable_path_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    config = REPO / "costmodel" / "data" / "models" / "Qwen--Qwen3-32B.config.json"
    result = run_cli("import-hf", str(config), "-o", str(blocker / "model.yaml"))
    assert result.code == 2 and "--output: cannot write there" in result.err, result.err


def test_a_discarded_staging_folder_takes_no_later_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal's cleanup runs beside the main thread's writes: one landing mid-removal leaves nothing."""
    out = OutputFolder.prepare(tmp_path / "out")
    out.path("front.json").write_text("{}\n")

    def remove_while_the_main_thread_writes(path: Path, ignore_errors: bool = False) -> None:
        for entry in Path(path).iterdir():
            entry.unlink()
        with contextlib.suppress(OSError):  # the main thread's next file, written between listing and rmdir
            out.path("front.csv").write_text("late\n")
        with contextlib.suppress(OSError):
            Path(path).rmdir()

    monkeypatch.setattr(out_dir.shutil, "rmtree", remove_while_the_main_thread_writes)
    out.discard()
    assert not (tmp_path / "out").exists(), list((tmp_path / "out").rglob("*"))


def test_the_main_thread_waits_for_a_signal_cleanup_under_way(tmp_path: Path) -> None:
    """The main thread failing (exit 1) while the watcher cleans up must not overtake the signal's 143."""
    script = ("interrupt.on_interrupt(lambda: time.sleep(1.0))\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n"
              "interrupt._stopping.wait(10)\n"  # the watcher has begun to stop: it is inside the cleanup
              "interrupt.yield_to_stop()\n"
              "sys.exit(1)\n")
    process = _with_the_watcher(script)
    assert process.returncode == 143, process.stderr
    assert "interrupted" in process.stderr


def test_a_cleanup_runs_on_a_signal_inside_its_block_only(tmp_path: Path) -> None:
    """A solve's temporary folder is removed when a signal ends the process during the solve, and a finished
    solve's cleanup does not linger (it would remove a later solve's folder of the same name, or pile up)."""
    inside, after = tmp_path / "inside", tmp_path / "after"
    script = (f"inside, after = pathlib.Path({str(inside)!r}), pathlib.Path({str(after)!r})\n"
              "after.mkdir()\n"
              "with interrupt.scoped_cleanup(lambda: after.rmdir()):\n"
              "    pass\n"
              "inside.mkdir()\n"
              "with interrupt.scoped_cleanup(lambda: inside.rmdir()):\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    time.sleep(10)\n")
    process = _with_the_watcher(script)
    assert process.returncode == 130, process.stderr
    assert not inside.exists() and after.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="child processes are found through Linux's /proc")
def test_a_signal_ends_the_solver_processes_started_for_the_solve(tmp_path: Path) -> None:
    """SIGTERM sent to `plan` alone (not its process group) must not leave a CBC run searching on by itself."""
    pid_file = tmp_path / "child"
    script = ("child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
              "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n"
              "time.sleep(10)\n")
    process = _with_the_watcher(script)
    child = int(pid_file.read_text())
    try:
        assert process.returncode == 143, process.stderr
        assert not _alive(child), "the child process outlived the signal"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie waiting for its new parent to reap it has ended)."""
    stat = Path(f"/proc/{pid}/stat")
    for _ in range(50):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in "ZX":
            return False
        time.sleep(0.1)
    return True


def test_a_signal_before_the_outputs_move_keeps_the_previous_ones(tmp_path: Path) -> None:
    """A signal whose stop has begun when the outputs are about to move: the move must not run (it used to,
    while the watcher was still on its way to the staging folder, and left old and new files mixed)."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "front.json").write_text("old\n")
    (folder / "plan-0.yaml").write_text("old\n")
    script = ("from planner.out_dir import OutputFolder\n"
              "interrupt.on_interrupt(lambda: time.sleep(0.5))\n"  # the watcher is slow to reach the staging
              f"out = OutputFolder.prepare(pathlib.Path({str(folder)!r}))\n"
              "out.path('front.json').write_text('new\\n')\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n"
              "interrupt._stopping.wait(10)\n"
              "out.commit()\n"
              "sys.exit(0)\n")
    process = _with_the_watcher(script)
    assert process.returncode == 143, process.stderr
    assert sorted(path.name for path in folder.iterdir()) == ["front.json", "plan-0.yaml"]
    assert (folder / "front.json").read_text() == "old\n"


def _with_the_watcher(script: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in a process of its own with `plan`'s signal watcher installed (the modules it names,
    os, signal, subprocess, sys, time and pathlib, imported)."""
    preamble = "import os, pathlib, signal, subprocess, sys, time\nfrom planner import interrupt\ninterrupt.install()\n"
    return subprocess.run([sys.executable, "-c", preamble + script], capture_output=True, text=True, cwd=REPO,
                          timeout=30)

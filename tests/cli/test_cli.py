"""The `plan` command end to end (in-process): outputs, formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.hardware import system_names
from costmodel.models import model_ids
from planner.schemas import json_schema
from tests.conftest import REPO, SCENARIOS
from tests.helpers import run_cli


def test_catalog_lists_every_model_and_system() -> None:
    result = run_cli("catalog", "--format", "json")
    assert result.code == 0
    data = json.loads(result.out)
    assert [row["id"] for row in data["models"]] == list(model_ids())
    assert [row["name"] for row in data["systems"]] == list(system_names())


def test_catalog_table_mentions_every_model() -> None:
    result = run_cli("catalog", "models")
    assert result.code == 0
    for model_id in model_ids():
        assert model_id in result.out


def test_every_bundled_model_lists_shared_configs(shared_dir: Path) -> None:
    files = sorted(shared_dir.glob("reference/models/*.json"))
    expected = {
        f.name.removesuffix(".json").removesuffix(".config").removesuffix(".reconstructed").replace("--", "/").lower()
        for f in files
    }
    assert {m.lower() for m in model_ids()} == expected


def test_show_model_deepseek_v3_headline_figures() -> None:
    result = run_cli("show", "model", "deepseek-ai/DeepSeek-V3", "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["total_params"] == pytest.approx(671e9, rel=0.02)
    assert data["active_params"] == pytest.approx(37e9, rel=0.02)
    assert data["kv_bytes_per_token"]["bf16"] == 70272
    table = run_cli("show", "model", "deepseek-v3")
    assert table.code == 0 and "70,272" in table.out and "671" in table.out


@pytest.mark.parametrize("name", system_names())
def test_show_every_system(name: str) -> None:
    result = run_cli("show", "system", name, "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["name"] == name
    assert run_cli("show", "system", name).code == 0


def test_show_unknown_model_exits_2_with_suggestion() -> None:
    result = run_cli("show", "model", "kimi-k4")
    assert result.code == 2
    assert result.err.startswith("error: ") and "kimi" in result.err.lower()
    assert "Traceback" not in result.err


def test_validate_scenario_and_layout() -> None:
    result = run_cli("validate", str(SCENARIOS / "deepseek-v3-8xh200.yaml"))
    assert result.code == 0 and "valid scenario" in result.out
    result = run_cli("validate", str(SCENARIOS / "deepseek-v3-8xh200.layout.yaml"))
    assert result.code == 0 and "valid layout" in result.out


def test_validate_bad_file_exits_2_naming_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nname: x\nmodel: deepseek-v3\ncluster: {system: h200, gpu: 8}\n")
    result = run_cli("validate", str(bad))
    assert result.code == 2
    assert f"{bad}:4: cluster.gpu: unknown field 'gpu'" in result.err
    assert "did you mean 'gpus'" in result.err
    assert run_cli("validate", str(tmp_path / "missing.yaml")).code == 2


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback_wherever_it_is_given(where: str, tmp_path: Path) -> None:
    args = ["validate", str(tmp_path / "missing.yaml")]
    result = run_cli(*(["--debug", *args] if where == "before" else [*args, "--debug"]))
    assert result.code == 2 and "Traceback" in result.err


@pytest.mark.parametrize("what", ["scenario", "layout", "measurements"])
def test_committed_json_schema_is_in_sync(what: str) -> None:
    committed = json.loads((REPO / "schemas" / f"{what}.schema.json").read_text(encoding="utf-8"))
    assert committed == json_schema(what), f"run: plan schema {what} > schemas/{what}.schema.json"
    assert json.loads(run_cli("schema", what).out) == committed


def test_import_hf_round_trips_through_a_scenario(tmp_path: Path) -> None:
    config = REPO / "costmodel" / "data" / "models" / "moonshotai--Kimi-K2.5.config.json"
    out = tmp_path / "kimi.yaml"
    result = run_cli("import-hf", str(config), "-o", str(out), "--name", "my-kimi")
    assert result.code == 0, result.err
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "schema_version: 1\nname: k\nmodel: kimi.yaml\ncluster: {system: gb200-nvl72, racks: 1}\n"
        "workload: {input_tokens: 1000, output_tokens: 100}\n"
    )
    result = run_cli("validate", str(scenario))
    assert result.code == 0, result.err
    assert "my-kimi" in result.out


def test_import_hf_bad_config_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"hidden_size": 1024}))
    result = run_cli("import-hf", str(config))
    assert result.code == 2 and "Traceback" not in result.err
    assert "config.json" in result.err


def test_a_bad_config_value_is_named_by_its_line(tmp_path: Path) -> None:
    """`plan import-hf` and a scenario whose model is the file both name the config's line of the bad key."""
    source = REPO / "costmodel" / "data" / "models" / "Qwen--Qwen3-30B-A3B.config.json"
    data = json.loads(source.read_text(encoding="utf-8")) | {"num_hidden_layers": 100_000}
    config = tmp_path / "bad.json"
    config.write_text(json.dumps(data, indent=2), encoding="utf-8")
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1) if '"num_hidden_layers"' in text)
    result = run_cli("import-hf", str(config))
    assert result.code == 2 and f"{config}:{line}: num_hidden_layers: num_hidden_layers must be" in result.err
    scenario = tmp_path / "s.yaml"
    scenario.write_text("schema_version: 1\nname: k\nmodel: bad.json\ncluster: {system: h100-sxm, gpus: 8}\n"
                        "workload: {input_tokens: 1000, output_tokens: 100}\n", encoding="utf-8")
    result = run_cli("validate", str(scenario))
    assert result.code == 2 and f"{scenario}:3: model: num_hidden_layers must" in result.err
    assert f"({config}:{line}, field num_hidden_layers)" in result.err


def test_evaluate_table_and_json() -> None:
    args = (str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--layout", str(SCENARIOS / "deepseek-v3-8xh200.layout.yaml"))
    table = run_cli("evaluate", *args)
    assert table.code == 0, table.err
    assert "TTFT" in table.out and "roofline floor" in table.out
    data = json.loads(run_cli("evaluate", *args, "--format", "json").out)
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "gpus", "feasible",
                "memory_per_gpu_gb", "bottleneck"):
        assert key in data
    assert data["gpus"] == 8 and data["feasible"] is True


def test_evaluate_cases_keeps_order_and_reports_bad_lines(tmp_path: Path) -> None:
    good_scenario = {"schema_version": 1, "name": "c", "model": "qwen3-30b", "cluster": {"system": "h100", "gpus": 8},
                     "workload": {"input_tokens": 1000, "output_tokens": 100}}
    good_layout = {"serving": "aggregated", "pools": [{"role": "mixed", "tp": 2, "moe_ep": 2, "batch": 16}]}
    bad_layout = {"serving": "aggregated", "pools": [{"role": "mixed", "tp": 2, "moe_ep": 4, "batch": 16}]}
    lines = [json.dumps({"scenario": good_scenario, "layout": good_layout}), "{not json",
             json.dumps({"scenario": good_scenario, "layout": bad_layout}),
             json.dumps({"scenario": {**good_scenario, "model": "nope"}, "layout": good_layout}),
             json.dumps({"scenario": good_scenario, "layout": good_layout})]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(lines) + "\n")
    result = run_cli("evaluate", "--cases", str(cases), "--format", "json")
    assert result.code == 0, result.err
    out = [json.loads(line) for line in result.out.splitlines()]
    assert [o["line"] for o in out] == [1, 2, 3, 4, 5]
    assert "error" not in out[0] and out[0] == {**out[4], "line": 1}
    assert "not valid JSON" in out[1]["error"]
    assert "moe_tp x moe_ep" in out[2]["error"]
    assert "model" in out[3]["error"]


def test_evaluate_needs_a_layout() -> None:
    result = run_cli("evaluate", str(SCENARIOS / "deepseek-v3-8xh200.yaml"))
    assert result.code == 2 and "--layout" in result.err


def test_a_closed_standard_output_is_exit_141_not_an_internal_error() -> None:
    """`plan evaluate ... | head -0`: the reader closed the pipe, which rich (and click) report as exit 1, the
    internal-error code; the CLI exits 141 (128 + SIGPIPE, as Unix tools do) and says nothing."""
    import subprocess
    import sys

    command = [sys.executable, "-c", "from planner.cli import main; main()", "evaluate",
               str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--layout",
               str(SCENARIOS / "deepseek-v3-8xh200.layout.yaml")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait() == 141 and error == ""


def test_json_cut_short_by_its_reader_is_exit_141() -> None:
    """`plan solve ... --format json | head -c 10`: the document (168 KB) outgrows the pipe; CPython took the
    partial write as written and the CLI exited 0 with most of it lost (found by fuzzing, session 38)."""
    import subprocess
    import sys

    command = [sys.executable, "-c", "from planner.cli import main; main()", "solve",
               str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--format", "json", "--time-limit", "20"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(10) == b'{\n  "statu'
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait() == 141 and error == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this platform")
def test_a_full_disk_is_exit_2_not_an_internal_error() -> None:
    """`plan ... > /dev/full` said "internal error" (exit 1, a bug's code) for where the output went."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-c", "from planner.cli import main; main()", "catalog"],
                                stdout=full, stderr=subprocess.PIPE, cwd=REPO, check=False)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("error: cannot write the output: No space left on device")


def test_validate_checks_a_model_file(tmp_path: Path) -> None:
    """A config.json or a model YAML from `plan import-hf` is checked as a model (it was read as a scenario: some
    40 missing scenario fields), its problems at their lines; a model YAML's KV heads must divide its heads as a
    config's must."""
    import yaml

    config = REPO / "costmodel" / "data" / "models" / "Qwen--Qwen3-30B-A3B.config.json"
    result = run_cli("validate", str(config))
    assert result.code == 0 and "valid model 'Qwen/Qwen3-30B-A3B': 48 layers, 128 routed experts" in result.out
    model = tmp_path / "q.model.yaml"
    assert run_cli("import-hf", str(config), "-o", str(model)).code == 0
    assert run_cli("validate", str(model)).code == 0
    data = yaml.safe_load(model.read_text())
    data["groups"][0]["layers"][0]["attention"]["num_kv_heads"] = 5
    model.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_cli("validate", str(model))
    line = next(n for n, text in enumerate(model.read_text().splitlines(), 1) if "num_kv_heads: 5" in text)
    assert result.code == 2 and f"{model}:" in result.err and "does not divide the 32 query heads" in result.err
    assert line - 5 <= int(result.err.split(f"{model}:")[1].split(":")[0]) <= line  # the attention block's line


def test_evaluate_takes_a_plan_file_alone_and_cases_alone(tmp_path: Path) -> None:
    """A plan file carries its scenario, as `plan export` reads it: SCENARIO may be left out; --cases beside
    SCENARIO or --layout would ignore them, so it is a usage error."""
    plan = REPO / "tests" / "export" / "plans" / "deepseek-v3-8xh200-plan-0.yaml"
    alone = run_cli("evaluate", "--layout", str(plan), "--format", "json")
    assert alone.code == 0, alone.err
    given = run_cli("evaluate", str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--layout", str(plan), "--format", "json")
    assert json.loads(alone.out)["ttft_ms"] == json.loads(given.out)["ttft_ms"]
    layout = SCENARIOS / "deepseek-v3-8xh200.layout.yaml"
    result = run_cli("evaluate", "--layout", str(layout))
    assert result.code == 2 and "carries no scenario" in result.err
    cases = tmp_path / "cases.jsonl"
    cases.write_text("{}\n")
    result = run_cli("evaluate", str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--cases", str(cases))
    assert result.code == 2 and "--cases evaluates the scenario and layout of each of its lines" in result.err

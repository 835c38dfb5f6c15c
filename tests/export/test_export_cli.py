"""`plan export` end to end: files written, what an engine cannot express kept as comments, bad input."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from costmodel.hardware import load_system
from planner.errors import InputError
from planner.export import dynamo, export_plan, load_plan
from planner.export.base import read_plan
from tests.conftest import SCENARIOS
from tests.export.engine_check import check_args, check_every_engine, flags_of
from tests.helpers import run_cli

PLANS = Path(__file__).parent / "plans"
AGGREGATED = PLANS / "deepseek-v3-8xh200-plan-0.yaml"
ATTENTION_TP_AND_DP = PLANS / "deepseek-v3-8xh200-plan-18.yaml"  # tp 2 x attention-DP 4
DISAGGREGATED = PLANS / "kimi-k2-gb200-nvl72-plan-18.yaml"  # decode instance over 4 nodes
SESSIONS = PLANS / "coding-agent-sessions-gb200-plan-6.yaml"


@pytest.mark.parametrize("engine", ["trtllm", "sglang", "vllm", "dynamo"])
def test_cli_writes_the_engines_files(engine: str, tmp_path: Path) -> None:
    result = run_cli("export", str(DISAGGREGATED), "--engine", engine, "--out", str(tmp_path))
    assert result.code == 0, result.err
    written = sorted(p.name for p in tmp_path.iterdir())
    expected = {"trtllm": ["launch-trtllm.sh", "trtllm-decode.yaml", "trtllm-eplb-decode.yaml",
                           "trtllm-eplb-prefill.yaml", "trtllm-prefill.yaml"],
                "sglang": ["launch-sglang.sh", "sglang-expert-location-decode.json",
                           "sglang-expert-location-prefill.json"],
                "vllm": ["launch-vllm.sh"], "dynamo": ["dynamo-deployment.yaml"]}[engine]
    assert written == expected
    for name in written:
        assert f"wrote {tmp_path / name}" in result.err
        if name.endswith(".yaml"):
            assert list(yaml.safe_load_all((tmp_path / name).read_text(encoding="utf-8")))


def test_cli_prints_the_files_without_out() -> None:
    result = run_cli("export", str(AGGREGATED), "--engine", "vllm")
    assert result.code == 0, result.err
    assert result.out.startswith("# ===== launch-vllm.sh\n#!/usr/bin/env bash\n")
    assert "vllm serve \\\n    deepseek-ai/DeepSeek-V3 \\\n" in result.out


def test_multinode_commands_carry_node_placeholders() -> None:
    plan = load_plan(DISAGGREGATED)
    sglang = export_plan(plan, "sglang")
    decode = list(sglang.commands["decode"][0].args)
    assert decode[decode.index("--nnodes") + 1] == "4" and "${NODE_RANK}" in decode
    script = sglang.files["launch-sglang.sh"]
    assert '--node-rank "${NODE_RANK}"' in script  # quoted so the shell expands it
    assert '--dist-init-addr "${HEAD_ADDR}:5000"' in script
    # node ranks follow the plan's GPU order, as the banks laid out rank by rank do
    assert "NODE_RANK 0..n-1 in the order the plan lists the instance's GPUs (placement.pools[1].instances" in script
    vllm = export_plan(plan, "vllm").commands["decode"]
    assert len(vllm) == 2 and "--headless" in vllm[1].args and "--headless" not in vllm[0].args


def test_vllm_spans_whole_nodes_with_its_multiprocessing_backend() -> None:
    """A prefill instance of tp 8 on GB200's 4-GPU nodes: a DP rank over two whole nodes runs over --nnodes (no
    Ray), node 0 serving, node 1 its workers headless; an instance of whole DP ranks per node keeps
    --data-parallel-size-local."""
    exported = export_plan(load_plan(SESSIONS), "vllm")
    head, rest = (list(command.args) for command in exported.commands["prefill"])
    for args in (head, rest):
        assert args[args.index("--nnodes") + 1] == "2" and args[args.index("--master-addr") + 1] == "${HEAD_ADDR}"
    assert head[head.index("--node-rank") + 1] == "0" and "--headless" not in head
    assert rest[rest.index("--node-rank") + 1] == "${NODE_RANK}" and "--headless" in rest
    assert not any("ray" in note.lower() for note in exported.unexpressed)
    assert '--node-rank "${NODE_RANK}"' in exported.files["launch-vllm.sh"]
    decode = list(export_plan(load_plan(DISAGGREGATED), "vllm").commands["decode"][0].args)
    assert "--data-parallel-size-local" in decode and "--nnodes" not in decode


def test_a_tp_beyond_the_heads_is_said_to_stop_vllm_and_sglang() -> None:
    """Both engines assert the heads divide the attention TP; a plan the cost model priced with heads replicated
    (tp a multiple of them, a layout warning) says the launch will not start."""
    import dataclasses

    from planner.export import sglang, vllm

    plan = load_plan(AGGREGATED)  # DeepSeek-V3: 128 heads
    wide = dataclasses.replace(plan.pools[0], tp=256)
    for engine in (vllm, sglang):
        assert not any("attention heads" in note for note in engine.unexpressed(plan, plan.pools[0]))
        assert any("tp 256 exceeds the model's 128 attention heads" in note for note in engine.unexpressed(plan, wide))


def test_vllm_is_said_to_run_mxfp4_experts_below_the_fp4_rate_on_fp4_tensor_cores() -> None:
    """vLLM 0.34 pairs MXFP4 experts with bf16 activations on Blackwell; the plan priced the fp4 rate."""
    import dataclasses

    from costmodel.hardware import load_system
    from planner.export import vllm

    gpt_oss = load_plan(PLANS / "gpt-oss-120b-8xb200-plan-24.yaml")  # B200: fp4 9 PFLOP/s, bf16 2.25
    assert any("MXFP4 experts with bf16 activations" in note and "fp4 rate, 4x bf16's" in note
               for note in vllm.unexpressed(gpt_oss, gpt_oss.pools[0]))
    on_hopper = dataclasses.replace(gpt_oss.pools[0], system=load_system("h200-sxm"))  # weight-only, as priced
    assert not any("MXFP4" in note for note in vllm.unexpressed(gpt_oss, on_hopper))
    kimi_k3 = load_plan(PLANS / "kimi-k3-16xb200-plan-6.yaml")  # compressed-tensors MXFP4
    assert any("MXFP4" in note for note in vllm.unexpressed(kimi_k3, kimi_k3.pools[0]))
    kimi_k2 = load_plan(DISAGGREGATED)  # int4 experts on GB200
    assert not any("MXFP4" in note for note in vllm.unexpressed(kimi_k2, kimi_k2.pools[0]))


def test_what_an_engine_cannot_express_is_a_comment() -> None:
    exported = export_plan(load_plan(ATTENTION_TP_AND_DP), "trtllm")
    assert exported.unexpressed and "attention TP 2 inside each of 4 attention-DP ranks" in exported.unexpressed[0]
    for name in ("trtllm-agg.yaml", "launch-trtllm.sh"):
        assert "# " + exported.unexpressed[0] in exported.files[name]
    vllm = export_plan(load_plan(AGGREGATED), "vllm")  # expert banks: vLLM has no placement file
    assert any("EPLB rebalances" in note for note in vllm.unexpressed)
    assert "EPLB rebalances" in vllm.files["launch-vllm.sh"]


def test_session_tiers_and_figures_are_written_as_comments() -> None:
    plan = load_plan(SESSIONS)
    for engine in ("trtllm", "sglang", "vllm", "dynamo"):
        text = "\n".join(export_plan(plan, engine).files.values())
        assert "# KV tiers of the fill pool" in text and "host_dram" in text
        assert f"tokens_per_s_per_gpu {plan.data['figures']['tokens_per_s_per_gpu']:.4g}" in text


def test_a_midfill_pool_runs_as_a_prefill_server() -> None:
    plan = load_plan(SESSIONS)
    data = yaml.safe_load(SESSIONS.read_text(encoding="utf-8"))
    prefill = next(i for i, p in enumerate(data["layout"]["pools"]) if p["role"] == "prefill")
    data["layout"]["pools"].append({**data["layout"]["pools"][prefill], "role": "midfill"})
    data["placement"]["pools"].append({**data["placement"]["pools"][prefill], "role": "midfill"})
    three = read_plan(SESSIONS, data, plan.resolved)
    exported = export_plan(three, "sglang")
    args = list(exported.commands["midfill"][0].args)
    assert args[args.index("--disaggregation-mode") + 1] == "prefill"
    assert check_args(args, flags_of("sglang")) == []
    assert "midfill pool: serves the turns that follow a gap" in exported.files["launch-sglang.sh"]
    services = export_plan(three, "dynamo", "trtllm").configs["dynamo-deployment.yaml"]["documents"][-1]
    assert set(services["spec"]["services"]) == {"Frontend", "prefill", "midfill", "decode"}


def test_scenario_option_overrides_the_embedded_one(tmp_path: Path) -> None:
    data = yaml.safe_load(AGGREGATED.read_text(encoding="utf-8"))
    del data["scenario"]
    bare = tmp_path / "plan-0.yaml"
    bare.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli("export", str(bare), "--engine", "sglang")
    assert result.code == 2
    assert f"{bare}: scenario: the plan carries no scenario" in result.err and "--scenario" in result.err
    result = run_cli("export", str(bare), "--engine", "sglang", "--scenario",
                     str(SCENARIOS / "deepseek-v3-8xh200.yaml"))
    assert result.code == 0, result.err


@pytest.mark.parametrize(("text", "field"), [
    ("figures: {}\n", "layout"),
    ("layout: {serving: aggregated, pools: []}\nscenario: {}\n", "layout.pools"),
])
def test_bad_plan_files_exit_2_naming_file_and_field(text: str, field: str, tmp_path: Path) -> None:
    path = tmp_path / "plan-9.yaml"
    path.write_text(text, encoding="utf-8")
    scenario = str(SCENARIOS / "deepseek-v3-8xh200.yaml")
    result = run_cli("export", str(path), "--engine", "trtllm", "--scenario", scenario)
    assert result.code == 2
    assert re.search(rf"{re.escape(str(path))}(:\d+)?: {re.escape(field)}:", result.err), result.err
    assert "Traceback" not in result.err


def test_bad_embedded_scenario_names_the_plan_file(tmp_path: Path) -> None:
    data = yaml.safe_load(AGGREGATED.read_text(encoding="utf-8"))
    data["scenario"]["cluster"]["system"] = "h900-sxm"
    path = tmp_path / "plan-0.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli("export", str(path), "--engine", "vllm")
    assert result.code == 2 and f"{path}" in result.err and "scenario." in result.err


def test_backend_is_for_dynamo_only() -> None:
    result = run_cli("export", str(AGGREGATED), "--engine", "vllm", "--backend", "sglang")
    assert result.code == 2 and "--backend applies to --engine dynamo only" in result.err


def test_unwritable_out_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    result = run_cli("export", str(AGGREGATED), "--engine", "vllm", "--out", str(blocker / "sub"))
    assert result.code == 2 and "--out: cannot write there" in result.err


@pytest.mark.slow  # solves every example again (test_examples does once): minutes on 2 cores
@pytest.mark.parametrize("scenario", sorted(p.name for p in SCENARIOS.glob("*.yaml") if ".layout." not in p.name))
def test_every_point_of_every_example_exports_for_every_engine(scenario: str, tmp_path: Path) -> None:
    """solve -> export on each bundled example: every front point, every engine, every flag checked."""
    result = run_cli("solve", str(SCENARIOS / scenario), "--time-limit", "20", "--format", "csv",
                     "--out", str(tmp_path))
    assert result.code == 0, result.err
    plans = sorted(tmp_path.glob("plan-*.yaml"))
    assert plans
    for path in plans:
        checked, problems = check_every_engine(load_plan(path))
        assert checked > 0 and problems == [], (path.name, problems)


def test_plans_solved_with_a_calibration_of_ones_own_export_whatever_the_calibration(tmp_path: Path) -> None:
    """The fit check reads HBM alone: a session plan's KV-store load depends on its rate, so a check priced with
    the bundled calibration refused 15 of 34 plans solved with a slower one (review, session 38)."""
    from costmodel.calibration import default_calibration
    from planner import api
    from tests.planner.small_scenarios import small_data

    slow = default_calibration().model_copy(update={"engines": {
        name: factors.model_copy(update={"step_overhead_s": 0.01})
        for name, factors in default_calibration().engines.items()}})
    scenario = tmp_path / "store.yaml"
    scenario.write_text(yaml.safe_dump(small_data("qwen3-30b-16xh100-agent-sessions-store")), encoding="utf-8")
    paths = api.solve(scenario, calibration=slow, time_limit_s=20).write(tmp_path / "out")
    plans = [path for path in paths if path.name.startswith("plan-")]
    assert plans
    for path in plans:
        assert export_plan(load_plan(path), "vllm", calibration=slow).commands


@pytest.mark.parametrize("command", [("validate",), ("export", "--engine", "vllm")])
def test_a_plan_that_does_not_fit_is_not_exported(command: tuple[str, ...], tmp_path: Path) -> None:
    """A hand-edited batch (100,000 sequences) was launched as --max-running-requests 100000; validate said valid."""
    data = yaml.safe_load(AGGREGATED.read_text(encoding="utf-8"))
    data["layout"]["pools"][0]["batch"] = 100_000
    path = tmp_path / "plan-0.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_cli(command[0], str(path), *command[1:])
    assert result.code == 2 and "Traceback" not in result.err
    assert f"{path}: layout: the plan does not fit: mixed pool: needs" in result.err
    assert "the largest batch that fits is" in result.err


def test_trtllm_is_not_exported_for_amd_gpus() -> None:
    """TensorRT-LLM runs on NVIDIA GPUs only, as a scenario's engine is checked (exit 2); Dynamo's default worker
    backend on AMD GPUs is vLLM, not TensorRT-LLM."""
    plan = load_plan(AGGREGATED)
    scenario = plan.resolved.scenario.model_copy(update={"engine": "generic"})
    generic = dataclasses.replace(plan.resolved, scenario=scenario)
    plan = dataclasses.replace(plan, resolved=generic)
    amd = dataclasses.replace(plan, pools=tuple(dataclasses.replace(p, system=load_system("mi300x"))
                                                for p in plan.pools))
    for engine, backend, instead in (("trtllm", None, "export for vllm or sglang"),
                                     ("dynamo", "trtllm", "--backend vllm or sglang")):
        with pytest.raises(InputError, match=f"trtllm runs on NVIDIA GPUs only and the plan's pools run on mi300x: "
                                             f"{instead}"):
            export_plan(amd, engine, backend)
    assert dynamo.backend_of(amd, None) == "vllm" and dynamo.backend_of(plan, None) == "trtllm"  # engine generic
    assert export_plan(amd, "vllm").commands
    assert any("is a CUDA build: on mi300x (AMD)" in note for note in export_plan(amd, "dynamo").unexpressed)


def test_a_plan_for_another_cluster_is_refused() -> None:
    """`--scenario` replaces the plan's scenario: the plan must still fit it, as `plan evaluate` requires."""
    result = run_cli("export", str(DISAGGREGATED), "--engine", "vllm", "--scenario",
                     str(SCENARIOS / "deepseek-v3-8xh200.yaml"))
    assert result.code == 2 and "Traceback" not in result.err
    assert f"{DISAGGREGATED}:" in result.err and "but the cluster has 8" in result.err


@pytest.mark.parametrize("command", [("validate",), ("export", "--engine", "sglang")])
def test_validate_and_export_check_a_plans_placement(command: tuple[str, ...], tmp_path: Path) -> None:
    data = yaml.safe_load(AGGREGATED.read_text(encoding="utf-8"))
    gpus = data["placement"]["pools"][0]["instances"][0]["gpus"]
    gpus[1] = gpus[0]
    path = tmp_path / "plan-0.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_cli(command[0], str(path), *command[1:])
    assert result.code == 2 and "Traceback" not in result.err
    assert "placement.pools.0.instances.0.gpus.1: h200-sxm/r0/n0/g0 is used twice" in result.err


@pytest.mark.parametrize("command", [("validate",), ("export", "--engine", "trtllm")])
def test_a_wide_instance_lists_each_nodes_gpus_together(command: tuple[str, ...], tmp_path: Path) -> None:
    """Engines number a multi-node instance's ranks node by node, in the plan's GPU order: GPUs of one node
    listed apart would launch ranks (and their banks) on other nodes than the plan placed them."""
    data = yaml.safe_load(DISAGGREGATED.read_text(encoding="utf-8"))
    gpus = data["placement"]["pools"][1]["instances"][0]["gpus"]
    gpus[3], gpus[4] = gpus[4], gpus[3]  # r0/n0/g3 after r0/n1/g0
    path = tmp_path / "plan-18.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_cli(command[0], str(path), *command[1:])
    assert result.code == 2 and "Traceback" not in result.err
    assert "placement.pools.1.instances.0.gpus.4: gb200-nvl72/r0/n0/g3 is apart from the other GPUs of its node" \
        in result.err


@pytest.mark.parametrize("command", [("validate",), ("export", "--engine", "sglang")])
@pytest.mark.parametrize(("rank", "message"), [
    (["x", 2], "found ['x']"), ([0, 1000], "found [1000]"), ([-1, 2], "found [-1]"), ([], "found []"),
    ([2], "are on no rank")])
def test_a_plans_expert_banks_are_checked(command: tuple[str, ...], rank: list[object], message: str,
                                          tmp_path: Path) -> None:
    """Hand-edited banks went into the engines' placement files (an expert 200 of 128), or crashed the export."""
    data = yaml.safe_load(DISAGGREGATED.read_text(encoding="utf-8"))
    name, banks = next((k, v) for k, v in data["expert_banks"].items() if len(v["gpu_experts"]) > 1)
    first = banks["gpu_experts"][0]
    banks["gpu_experts"][0] = rank if message != "are on no rank" else first[1:]
    path = tmp_path / "plan-18.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_cli(command[0], str(path), *command[1:])
    assert result.code == 2 and "Traceback" not in result.err
    assert f"{path}: expert_banks.{name}.gpu_experts" in result.err and message in result.err, result.err


@pytest.mark.parametrize("command", [("validate",), ("export", "--engine", "vllm")])
def test_a_plans_stages_must_be_its_layouts(command: tuple[str, ...], tmp_path: Path) -> None:
    """Stages edited by hand (layers left to no stage) were launched as the script's comments."""
    data = yaml.safe_load(AGGREGATED.read_text(encoding="utf-8"))  # pp 2: two stages
    data["placement"]["pools"][0]["stages"][0]["layers"] = [0, 10]
    path = tmp_path / "plan-0.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_cli(command[0], str(path), *command[1:])
    assert result.code == 2 and "Traceback" not in result.err
    assert "placement.pools.0.stages: the stages are not the layout's (stage 0: layers 0-" in result.err


def test_a_problem_of_a_plans_scenario_is_at_its_line(tmp_path: Path) -> None:
    data = yaml.safe_load(AGGREGATED.read_text(encoding="utf-8"))
    data["scenario"]["workload"]["input_tokens"] = -5
    path = tmp_path / "plan-0.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "input_tokens: -5" in text)
    result = run_cli("export", str(path), "--engine", "vllm")
    assert result.code == 2 and f"{path}:{line}: scenario.workload.input_tokens:" in result.err, result.err


def test_validate_checks_a_plan_against_the_scenario_it_carries() -> None:
    result = run_cli("validate", str(AGGREGATED))
    assert result.code == 0, result.err
    assert "valid layout (aggregated, 8 GPUs) for 'deepseek-v3-8xh200' on 8 x h200-sxm" in result.out

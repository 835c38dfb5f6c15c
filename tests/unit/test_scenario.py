"""Scenario and layout files: structural and semantic validation, with file/line/field messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from costmodel.precision import Dtype
from costmodel.resolve import compute_dtype
from planner.errors import InputError
from planner.scenario import layout_from_text, load_layout, load_scenario
from tests.conftest import SCENARIOS

BASE = """\
schema_version: 1
name: test
model: deepseek-ai/DeepSeek-V3
precision: {weights: fp8, kv_cache: fp8}
cluster: {system: h200-sxm, gpus: 8}
workload: {input_tokens: 4096, output_tokens: 1024}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_scenario(_write(tmp_path, text))
    return info.value


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_scenario_validates(path: Path) -> None:
    if path.name.endswith(".layout.yaml"):
        load_layout(path)
    else:
        assert load_scenario(path).gpus > 0


def test_minimal_scenario_resolves_counts_and_defaults(tmp_path: Path) -> None:
    resolved = load_scenario(_write(tmp_path, BASE))
    assert resolved.gpus == 8
    assert resolved.group.nodes == 1
    assert resolved.experts is Dtype.FP8  # experts default to the weights' format
    assert resolved.scenario.search.solver == "cpsat"
    assert resolved.scenario.engine == "generic"


def test_precision_defaults_to_the_models_native_formats(tmp_path: Path) -> None:
    text = BASE.replace("deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b").replace(
        "precision: {weights: fp8, kv_cache: fp8}", "precision: {}"
    ).replace("h200-sxm", "b200-sxm")
    resolved = load_scenario(_write(tmp_path, text))
    assert (resolved.weights, resolved.experts) == (Dtype.BF16, Dtype.FP4)


def test_racks_and_nodes_count_gpus(tmp_path: Path) -> None:
    text = BASE.replace("{system: h200-sxm, gpus: 8}", "{system: gb200-nvl72, racks: 2}")
    assert load_scenario(_write(tmp_path, text)).gpus == 144
    text = BASE.replace("{system: h200-sxm, gpus: 8}", "{system: h100, nodes: 3}")
    assert load_scenario(_write(tmp_path, text)).gpus == 24


def test_unknown_key_names_line_and_suggests(tmp_path: Path) -> None:
    error = _error(tmp_path, BASE + "slo: {ttft_ms: 100, tpotms: 20}\n")
    (problem,) = error.problems
    assert (problem.line, problem.field) == (7, "slo.tpotms")
    assert "did you mean 'tpot_ms'" in problem.message


def test_missing_field_is_named_with_its_meaning(tmp_path: Path) -> None:
    error = _error(tmp_path, BASE.replace("output_tokens: 1024", "cached_tokens: 0"))
    (problem,) = error.problems
    assert problem.field == "workload.output_tokens"
    assert problem.line == 6
    assert "Generated tokens per request" in problem.message


def test_wrong_type_and_range_are_reported(tmp_path: Path) -> None:
    error = _error(tmp_path, BASE.replace("input_tokens: 4096", "input_tokens: -5"))
    assert error.problems[0].field == "workload.input_tokens"
    assert "greater than 0" in error.problems[0].message
    error = _error(tmp_path, BASE.replace("input_tokens: 4096", "input_tokens: '4096'"))
    assert "valid integer" in error.problems[0].message


@pytest.mark.parametrize(("value", "says"), [("1", "greater than or equal to 2"), ("alll", "should be 'all'")])
def test_a_number_or_word_field_reports_the_member_meant(tmp_path: Path, value: str, says: str) -> None:
    """`front_points` takes a number (at least 2) or 'all': a number is told about the number, a word about the
    word, once each, under the field's own name."""
    error = _error(tmp_path, BASE + f"search: {{front_points: {value}}}\n")
    assert [(p.field, p.line) for p in error.problems] == [("search.front_points", 7)]
    assert says in error.problems[0].message


def test_an_invalid_override_is_named_at_its_line(tmp_path: Path) -> None:
    """The override that fails its check, at its own line (it was reported at the first override, with pydantic's
    "system: Value error," in the message)."""
    text = BASE.replace("cluster: {system: h200-sxm, gpus: 8}\n", "cluster:\n  system: h200-sxm\n  gpus: 8\n"
                        "  overrides:\n    scaleup_latency_s: 1.0e-06\n    hbm_capacity_bytes: -3\n")
    problem = _error(tmp_path, text).problems[0]
    assert (problem.field, problem.line) == ("cluster.overrides.hbm_capacity_bytes", 10)
    assert problem.message.startswith("hbm_capacity_bytes must lie between") and "Value error" not in problem.message


def test_a_systems_name_is_not_an_override(tmp_path: Path) -> None:
    """`overrides: {name: b200-sxm}` on H200s reported "8 x b200-sxm" and priced B200 GPU-hours."""
    problem = _error(tmp_path, BASE.replace("gpus: 8}", "gpus: 8, overrides: {name: b200-sxm}}")).problems[0]
    assert problem.field == "cluster.overrides" and "name cannot be overridden" in problem.message


@pytest.mark.parametrize(("value", "field", "says"), [
    ("-1", "economics.usd_per_gpu_hour", "greater than 0"), ("'3$'", "economics.usd_per_gpu_hour", "valid number"),
    ("{h200-sxm: -2}", "economics.usd_per_gpu_hour.h200-sxm", "greater than 0"),
])
def test_a_number_or_mapping_field_reports_the_member_meant(tmp_path: Path, value: str, field: str,
                                                            says: str) -> None:
    """A price is one number or a mapping by system: a number or a word is told about the number alone (it was
    also told "should be a valid dictionary"), a mapping about its entry."""
    error = _error(tmp_path, BASE + f"economics: {{usd_per_gpu_hour: {value}}}\n")
    assert [(p.field, p.line) for p in error.problems] == [(field, 7)]
    assert says in error.problems[0].message


def test_a_price_by_an_alias_names_the_catalog_system(tmp_path: Path) -> None:
    """`cluster.system` takes h200; a per-system price must name the catalog id, and the message says which."""
    problem = _error(tmp_path, BASE + "economics: {usd_per_gpu_hour: {h200: 3.0}}\n").problems[0]
    assert problem.field == "economics.usd_per_gpu_hour.h200" and "('h200' is h200-sxm: write that)" in problem.message


def test_trtllm_needs_nvidia_gpus(tmp_path: Path) -> None:
    """TensorRT-LLM has no ROCm build: a TRT-LLM plan on MI300X could not be launched."""
    problem = _error(tmp_path, BASE.replace("h200-sxm", "mi300x") + "engine: trtllm\n").problems[0]
    assert problem.field == "cluster.system" and "runs on NVIDIA GPUs only and mi300x is AMD" in problem.message


def test_short_float_notation_is_read_as_a_number(tmp_path: Path) -> None:
    text = BASE.replace("gpus: 8}", "gpus: 8, overrides: {nic_bandwidth_bytes_per_s: 1e11}}")
    assert load_scenario(_write(tmp_path, text)).system.nic_bandwidth_bytes_per_s == 1e11


def test_unknown_override_is_rejected(tmp_path: Path) -> None:
    text = BASE.replace("gpus: 8}", "gpus: 8, overrides: {hbm_gb: 100}}")
    problem = _error(tmp_path, text).problems[0]
    assert problem.field == "cluster.overrides"
    assert "hbm_gb" in problem.message


def test_duplicate_key_and_syntax_error_give_lines(tmp_path: Path) -> None:
    problem = _error(tmp_path, BASE + "name: again\n").problems[0]
    assert problem.line == 7 and "twice" in problem.message
    problem = _error(tmp_path, BASE + "slo: {ttft_ms: [\n").problems[0]
    assert problem.line is not None and "not valid YAML" in problem.message


@pytest.mark.parametrize(("text", "line", "says"), [
    ('schema_version: 1\nname: "t\nmodel: x\n', 2, "while scanning a quoted scalar that starts here"),
    ("schema_version: 1\ncluster: {system: h200-sxm, gpus: 8\nworkload: {input_tokens: 1}\n", 2,
     "on line 3, while parsing a flow mapping that starts here"),
    ("a: 1\n- b\n", 2, "expected <block end>"),
])
def test_a_syntax_error_names_the_line_left_open(tmp_path: Path, text: str, line: int, says: str) -> None:
    """An unclosed quote or brace is reported where it opens (PyYAML's problem mark is where parsing failed,
    often the end of the file); other errors where they fail (a block mapping's context is its first line)."""
    problem = _error(tmp_path, text).problems[0]
    assert problem.line == line and says in problem.message


def test_cluster_needs_exactly_one_count(tmp_path: Path) -> None:
    problem = _error(tmp_path, BASE.replace("gpus: 8}", "gpus: 8, nodes: 1}")).problems[0]
    assert problem.field == "cluster" and "exactly one" in problem.message


def test_a_gpu_count_may_end_in_a_partial_node(tmp_path: Path) -> None:
    resolved = load_scenario(_write(tmp_path, BASE.replace("gpus: 8", "gpus: 12")))
    assert resolved.gpus == 12 and resolved.group.nodes == 2
    assert [d.capacity for d in resolved.group.domains] == [8, 4]  # the second node holds 4 GPUs
    assert [d.complete for d in resolved.group.domains] == [True, False]


def test_unknown_model_suggests_close_names(tmp_path: Path) -> None:
    problem = _error(tmp_path, BASE.replace("deepseek-ai/DeepSeek-V3", "deepseek-v4")).problems[0]
    assert (problem.field, problem.line) == ("model", 3)
    assert "deepseek" in problem.message.lower()


def test_fp4_on_hopper_runs_weight_only(tmp_path: Path) -> None:
    resolved = load_scenario(_write(tmp_path, BASE.replace("weights: fp8", "weights: fp8, experts: fp4")))
    assert resolved.experts is Dtype.FP4
    assert compute_dtype(resolved.experts, resolved.system) is Dtype.BF16
    assert compute_dtype(Dtype.FP8, resolved.system) is Dtype.FP8


def test_context_longer_than_the_model_is_rejected(tmp_path: Path) -> None:
    problem = _error(tmp_path, BASE.replace("input_tokens: 4096", "input_tokens: 400000")).problems[0]
    assert problem.field == "workload" and "163840" in problem.message


@pytest.mark.parametrize(("search", "field", "says"), [
    ("{tp: [1, 3]}", "search.tp.1", "tp 3 does not divide the 128 attention heads"),
    ("{pp: [1, 2, 64]}", "search.pp.2", "pp 64 exceeds the model's 61 layers"),
])
def test_search_degrees_must_split_the_model(tmp_path: Path, search: str, field: str, says: str) -> None:
    """A degree a layout could not have is refused where the search names it, not solved into plans that `plan
    evaluate` and `plan export` then refuse."""
    text = BASE.replace("gpus: 8}", "gpus: 128}") + f"search: {search}\n"
    problem = _error(tmp_path, text).problems[0]
    assert problem.field == field and says in problem.message and problem.line == 7


def test_mtp_needs_mtp_layers(tmp_path: Path) -> None:
    text = BASE.replace("deepseek-ai/DeepSeek-V3", "qwen3-235b").replace(
        "output_tokens: 1024}", "output_tokens: 1024, speculative: {method: mtp}}"
    )
    problem = _error(tmp_path, text).problems[0]
    assert problem.field == "workload.speculative.method"


def test_layout_gpu_products_must_match() -> None:
    with pytest.raises(InputError) as info:
        layout_from_text(
            "serving: aggregated\npools:\n  - {role: mixed, tp: 2, dp_attention: 4, moe_ep: 4, batch: 8}\n"
        )
    problem = info.value.problems[0]
    assert problem.field == "pools.0" and problem.line == 3
    assert "tp x dp_attention = 2 x 4 = 8" in problem.message


def test_layout_roles_must_match_serving() -> None:
    with pytest.raises(InputError, match="roles"):
        layout_from_text("serving: disaggregated\npools:\n  - {role: mixed, batch: 8}\n")


def test_layout_checked_against_the_scenario(tmp_path: Path) -> None:
    resolved = load_scenario(_write(tmp_path, BASE))
    too_big = "serving: aggregated\npools:\n  - {role: mixed, replicas: 2, dp_attention: 8, moe_ep: 8, batch: 64}\n"
    with pytest.raises(InputError, match="holds 16 GPUs but the cluster has 8"):
        layout_from_text(too_big, resolved)
    bad_tp = "serving: aggregated\npools:\n  - {role: mixed, tp: 3, moe_ep: 3, batch: 8}\n"
    with pytest.raises(InputError, match="does not divide the 128 attention heads"):
        layout_from_text(bad_tp, resolved)
    layout = load_layout(SCENARIOS / "deepseek-v3-8xh200.layout.yaml", resolved)
    assert layout.gpus == 8


def test_a_session_must_fit_the_context_by_its_last_turn() -> None:
    from planner.scenario import scenario_from_data

    data = {"schema_version": 1, "name": "s", "model": "deepseek-v3", "cluster": {"system": "gb200-nvl72", "racks": 1},
            "workload": {"sessions": {"arrival_rate_per_s": 0.15, "turns": 50, "system_prompt_tokens": 50000,
                                      "turn_lengths": [{"share": 1.0, "input_tokens": 2000, "output_tokens": 1000}]}}}
    with pytest.raises(InputError) as info:
        scenario_from_data(data)
    problem = info.value.problems[0]
    assert problem.field == "workload.sessions.turns"
    assert "200000 tokens" in problem.message and "at most 37 turns" in problem.message  # 50,000 + 37 x 3,000 fits
    data["workload"]["sessions"]["turns"] = 37
    assert scenario_from_data(data).scenario.workload.sessions is not None

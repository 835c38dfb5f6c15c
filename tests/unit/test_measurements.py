"""The calibration CSV as typed measurements: every usable row validates and resolves, skips are explained,
and hand-checked rows map exactly as the module docstring says."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.measurements import Measurement, load_measurements, load_measurements_with_skips
from costmodel.layout import Layout
from costmodel.resolve import check_layout
from costmodel.scenario import Scenario
from planner.scenario import scenario_from_data

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CSV_PATH = SHARED / "calibration" / "serving_measurements.csv"

# Rows whose CSV layout contradicts itself (tp x attention_dp != moe_tp x moe_ep on an MoE model).
RULE_BREAKS = {
    "qwen3_235b_a22b_qwen3_235b_a22b_h100_sxm_vllm_disagg_4000x1000_c_tpnone_epnone_2",
    "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_2000x100_c5_tp1_epnone_11",
    "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_2000x2000_c9_tp1_epnone_19",
    "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_4000x1000_c7_tp1_epnone_29",
    "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_8000x500_c7_tp2_epnone_40",
}
HEADER = [
    "id", "concurrency", "backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
    "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
    "moe_ep_size", *(f"{role}_{field}" for role in ("prefill", "decode") for field in (
        "batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")),
    "silicon_ttft_ms", "silicon_tpot_ms",
]
AGG_ROW = {
    "id": "r1", "concurrency": "16", "backend": "trtllm", "backend_version": "1.0", "model_path": "Qwen/Qwen3-32B",
    "system": "h100_sxm", "mode": "agg", "isl": "1000", "osl": "100", "gemm_quant_mode": "fp8",
    "moe_quant_mode": "fp8", "batch_size": "16", "tp_size": "2", "pp_size": "1", "attention_dp_size": "",
    "moe_tp_size": "1", "moe_ep_size": "0", "silicon_ttft_ms": "100.5", "silicon_tpot_ms": "10.25",
}


@pytest.fixture(scope="module")
def loaded() -> tuple[list[Measurement], list[tuple[str, str]]]:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return load_measurements_with_skips(CSV_PATH)


@pytest.fixture(scope="module")
def by_id(loaded: tuple[list[Measurement], list[tuple[str, str]]]) -> dict[str, Measurement]:
    return {m.id: m for m in loaded[0]}


def _write_csv(tmp_path: Path, *rows: dict[str, str]) -> Path:
    path = tmp_path / "rows.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    return path


# --- the real CSV -------------------------------------------------------------------------------------


def test_every_row_is_usable(loaded: tuple[list[Measurement], list[tuple[str, str]]]) -> None:
    usable, skipped = loaded
    assert (len(usable), skipped) == (1550, [])
    by_id = {m.id: m for m in usable}
    for row in RULE_BREAKS:  # vLLM's defaults fill the side the CSV left out
        pool = by_id[row].layout["pools"][0]
        assert pool["tp"] * pool["dp_attention"] == pool["moe_tp"] * pool["moe_ep"]
        assert any("read as" in note for note in by_id[row].assumptions)
    uneven = [m for m in usable if any("does not split the 128 heads" in note for note in m.assumptions)]
    assert len(uneven) == 49 and all("deepseek_r1_gb200" in m.id for m in uneven)
    assert all(pool["tp"] == 1 for m in uneven for pool in m.layout["pools"] if pool["dp_attention"] > 1)


def test_usable_rows_keep_file_order(loaded: tuple[list[Measurement], list[tuple[str, str]]]) -> None:
    with CSV_PATH.open(newline="", encoding="utf-8") as handle:
        ids = [row["id"] for row in csv.DictReader(handle)]
    skipped = {row for row, _ in loaded[1]}
    assert [m.id for m in loaded[0]] == [i for i in ids if i not in skipped]
    assert load_measurements(CSV_PATH) == loaded[0]


def test_every_usable_row_validates_and_resolves(loaded: tuple[list[Measurement], list[tuple[str, str]]]) -> None:
    for m in loaded[0]:
        scenario = Scenario.model_validate(m.scenario)
        layout = Layout.model_validate(m.layout)
        resolved = scenario_from_data(m.scenario)
        check_layout(resolved, layout)
        per_node = resolved.system.gpus_per_node
        assert layout.gpus <= resolved.gpus
        assert resolved.gpus == layout.gpus if layout.gpus < per_node else resolved.gpus % per_node == 0
        assert scenario.workload.concurrency == m.concurrency
        assert layout.serving == m.serving


def test_row_counts_per_group(loaded: tuple[list[Measurement], list[tuple[str, str]]]) -> None:
    counts = {key: dict(Counter(m.group(key) for m in loaded[0])) for key in ("model", "system", "engine", "serving")}
    assert counts == {
        "model": {
            "MiniMaxAI/MiniMax-M2.5": 163, "Qwen/Qwen3-235B-A22B-FP8": 84, "Qwen/Qwen3-32B": 141,
            "deepseek-ai/DeepSeek-R1": 566, "deepseek-ai/DeepSeek-V3": 150,
            "meta-llama/Meta-Llama-3.1-70B": 168, "meta-llama/Meta-Llama-3.1-8B": 91, "openai/gpt-oss-120b": 187,
        },
        "system": {"b200-sxm": 634, "gb200-nvl72": 218, "h100-sxm": 353, "h200-sxm": 345},
        "engine": {"sglang": 382, "trtllm": 780, "vllm": 388},
        "serving": {"aggregated": 1085, "disaggregated": 465},
    }


def test_mtp_rows_of_the_csv(loaded: tuple[list[Measurement], list[tuple[str, str]]]) -> None:
    """The rows benchmarks/speculative_runs.py tags: every TRT-LLM DeepSeek-R1 row of the two builds, all
    aggregated, 64 in all."""
    tagged = [m for m in loaded[0] if "speculative" in m.scenario["workload"]]
    assert Counter(m.engine_version for m in tagged) == {"1.1.0rc2.post2": 30, "1.2.0rc6.post3": 34}
    assert {(m.engine, m.model, m.serving) for m in tagged} == {("trtllm", "deepseek-ai/DeepSeek-R1", "aggregated")}


def test_aggregated_row_with_attention_dp(by_id: dict[str, Measurement]) -> None:
    m = by_id["minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c32_cfg691"]
    assert (m.model, m.system, m.engine, m.engine_version, m.serving) == (
        "MiniMaxAI/MiniMax-M2.5", "b200-sxm", "vllm", "0.19.0", "aggregated")
    assert (m.isl, m.osl, m.concurrency) == (1024, 1024, 32)
    assert (m.ttft_ms, m.tpot_ms) == (106.03966326016234, 13.594821577724254)
    assert m.layout == {"schema_version": 1, "serving": "aggregated", "pools": [
        {"role": "mixed", "replicas": 1, "tp": 4, "dp_attention": 4, "pp": 1, "moe_tp": 1, "moe_ep": 16, "batch": 32},
    ]}
    assert m.scenario == {
        "schema_version": 1, "name": m.id, "model": "MiniMaxAI/MiniMax-M2.5",
        "precision": {"weights": "fp8", "experts": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "b200-sxm", "gpus": 16},
        "workload": {"input_tokens": 1024, "output_tokens": 1024, "concurrency": 32},
        "engine": "vllm",
    }
    assert m.assumptions == ()


def test_disaggregated_row_with_workers(by_id: dict[str, Measurement]) -> None:
    m = by_id["dsr1_gb200_sglang_fp4_disagg_1024x1024_c2048_cfg483"]
    assert (m.model, m.system, m.engine, m.serving, m.concurrency) == (
        "deepseek-ai/DeepSeek-V3", "gb200-nvl72", "sglang", "disaggregated", 2048)
    assert m.layout["pools"] == [
        {"role": "prefill", "replicas": 4, "tp": 1, "dp_attention": 4, "pp": 1, "moe_tp": 1, "moe_ep": 4, "batch": 4},
        {"role": "decode", "replicas": 1, "tp": 1, "dp_attention": 32, "pp": 1, "moe_tp": 1, "moe_ep": 32,
         "batch": 2048},
    ]
    assert m.scenario["precision"] == {"weights": "fp4", "experts": "fp4", "kv_cache": "fp8"}
    assert m.scenario["cluster"] == {"system": "gb200-nvl72", "gpus": 48}
    assert m.assumptions == ()


def test_disaggregated_row_without_workers(by_id: dict[str, Measurement]) -> None:
    m = by_id["2026_04_06_deepseek_r1_gb200_trtllm_fp4_disagg_8192x1024_c12_tp4_ep4_1166"]
    assert (m.model, m.engine, m.engine_version, m.isl, m.osl, m.concurrency) == (
        "deepseek-ai/DeepSeek-R1", "trtllm", "0.8.1.post2", 8192, 1024, 12)
    assert m.layout["pools"] == [
        {"role": "prefill", "replicas": 1, "tp": 4, "dp_attention": 1, "pp": 1, "moe_tp": 1, "moe_ep": 4, "batch": 1},
        {"role": "decode", "replicas": 1, "tp": 8, "dp_attention": 1, "pp": 1, "moe_tp": 2, "moe_ep": 4, "batch": 12},
    ]
    assert m.scenario["cluster"] == {"system": "gb200-nvl72", "gpus": 12}
    assert m.assumptions == (
        "prefill_num_workers missing: assumed 1",
        "decode_num_workers missing: assumed 1",
        "decode_batch_size missing: assumed ceil(concurrency / decode replicas) = 12",
        "prefill_batch_size missing: assumed 1 per attention-DP rank, batch 1",
    )


# --- synthetic rows (no shared data needed) -------------------------------------------------------------


def test_dense_model_expert_fields_follow_tp(tmp_path: Path) -> None:
    (m,) = load_measurements(_write_csv(tmp_path, AGG_ROW))
    assert m.model == "Qwen/Qwen3-32B" and m.system == "h100-sxm"
    assert m.layout["pools"][0] == {"role": "mixed", "replicas": 1, "tp": 2, "dp_attention": 1, "pp": 1,
                                    "moe_tp": 2, "moe_ep": 1, "batch": 16}
    assert m.scenario["cluster"]["gpus"] == 2  # under one node: the exact count
    assert m.assumptions == ("mixed pool: dense model, moe_tp x moe_ep = 1 x 1 replaced by tp x attention_dp = 2 x 1",)


def test_moe_rule_break_is_skipped(tmp_path: Path) -> None:
    row = AGG_ROW | {"id": "bad", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "moe_tp_size": "3"}
    usable, skipped = load_measurements_with_skips(_write_csv(tmp_path, row))
    assert usable == []
    assert skipped == [("bad", "mixed pool: tp x attention_dp = 2 x 1 != moe_tp x moe_ep = 3 x 1")]


def test_expert_gpus_beyond_tp_are_attention_dp(tmp_path: Path) -> None:
    """vLLM --data-parallel-size 2 --tensor-parallel-size 2: experts tensor-sharded over all 4 GPUs."""
    row = AGG_ROW | {"id": "dp", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "moe_tp_size": "4"}
    (m,) = load_measurements(_write_csv(tmp_path, row))
    assert m.layout["pools"][0] | {"batch": 0} == {"role": "mixed", "replicas": 1, "tp": 2, "dp_attention": 2, "pp": 1,
                                                   "moe_tp": 4, "moe_ep": 1, "batch": 0}


def test_uneven_tp_is_attention_dp(tmp_path: Path) -> None:
    """SGLang and TRT-LLM report the world size as tp under attention DP; 36 cannot split 128 heads."""
    row = AGG_ROW | {"id": "w", "model_path": "deepseek-ai/DeepSeek-R1", "system": "gb200", "tp_size": "36",
                     "moe_tp_size": "1", "moe_ep_size": "36", "batch_size": "72"}
    (m,) = load_measurements(_write_csv(tmp_path, row))
    pool = m.layout["pools"][0]
    assert (pool["tp"], pool["dp_attention"], pool["moe_ep"], pool["batch"]) == (1, 36, 36, 72)


def test_expert_tp_that_cannot_split_the_experts_is_expert_parallel(tmp_path: Path) -> None:
    """TRT-LLM's GB200 rows at tp 52, moe_tp 52: no engine shards DeepSeek's 2048-wide expert intermediate 52
    ways, so the experts are placed whole over the 52 attention-DP ranks (wide EP); a moe_tp that divides the
    intermediate (8) is kept."""
    row = AGG_ROW | {"id": "w", "model_path": "deepseek-ai/DeepSeek-R1", "system": "gb200", "tp_size": "52",
                     "moe_tp_size": "52", "moe_ep_size": "1", "batch_size": "269"}
    (m,) = load_measurements(_write_csv(tmp_path, row))
    pool = m.layout["pools"][0]
    assert (pool["tp"], pool["dp_attention"], pool["moe_tp"], pool["moe_ep"]) == (1, 52, 1, 52)
    assert any("does not split the experts' 2048-wide intermediate" in note for note in m.assumptions)
    kept = AGG_ROW | {"id": "k", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "tp_size": "8",
                      "moe_tp_size": "8", "moe_ep_size": "1", "batch_size": "16"}
    (m,) = load_measurements(_write_csv(tmp_path, kept))
    assert (m.layout["pools"][0]["moe_tp"], m.layout["pools"][0]["moe_ep"]) == (8, 1)


def test_expert_world_squared_is_a_k_gpu_run(tmp_path: Path) -> None:
    """tp 64 / attention DP 64 with moe_tp = moe_ep = 8 on 8-GPU nodes is the 8-GPU run (tp or DP 8, ep 8) the
    CSV repeats under another id with the same figures; a 2 x 2 row within one node is kept as written."""
    base = AGG_ROW | {"model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "moe_tp_size": "8",
                      "moe_ep_size": "8"}
    tp_row = base | {"id": "tp", "tp_size": "64", "batch_size": "16"}
    dp_row = base | {"id": "dp", "tp_size": "1", "attention_dp_size": "64", "batch_size": "4", "concurrency": "256"}
    small = base | {"id": "small", "model_path": "openai/gpt-oss-120b", "tp_size": "4", "moe_tp_size": "2",
                    "moe_ep_size": "2"}
    tp, dp, kept = load_measurements(_write_csv(tmp_path, tp_row, dp_row, small))
    pools = [m.layout["pools"][0] for m in (tp, dp, kept)]
    assert [(p["tp"], p["dp_attention"], p["moe_tp"], p["moe_ep"], p["batch"]) for p in pools] == [
        (8, 1, 1, 8, 16), (1, 8, 1, 8, 256), (4, 1, 2, 2, 16)]
    assert (tp.scenario["cluster"]["gpus"], dp.scenario["cluster"]["gpus"]) == (8, 8)
    assert tp.assumptions == ("mixed pool: tp x attention_dp = 64 x 1 with moe_tp = moe_ep = 8 over 64 GPUs: "
                              "read as a 8-GPU run, tp 8 x attention_dp 1, moe_tp 1 x moe_ep 8",)
    assert kept.assumptions == ()


def test_campaign_rows_of_the_mtp_builds_run_mtp(tmp_path: Path) -> None:
    """TRT-LLM DeepSeek-R1 rows of the 2026 campaigns on builds 1.1.0rc2.post2 / 1.2.0rc6.post3 ran one MTP
    draft token (benchmarks/speculative_runs.py); another build, another campaign or another engine did not."""
    base = AGG_ROW | {"model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "tp_size": "8",
                      "moe_tp_size": "1", "moe_ep_size": "8", "backend_version": "1.2.0rc6.post3"}
    rows = (base | {"id": "2026_04_06_dsr1_a"}, base | {"id": "2026_03_25_dsr1_b", "backend_version": "1.1.0rc2.post2"},
            base | {"id": "2026_04_06_dsr1_c", "backend_version": "1.2.0rc6.post2"},
            base | {"id": "dsr1_b200_trtllm_cfg1"}, base | {"id": "2026_04_06_dsr1_d", "backend": "sglang"},
            base | {"id": "2026_04_06_dsv3_e", "model_path": "deepseek-ai/DeepSeek-V3"})
    tagged = [m.scenario["workload"].get("speculative") for m in load_measurements(_write_csv(tmp_path, *rows))]
    mtp = {"method": "mtp", "draft_tokens": 1, "acceptance_rate": 0.85}
    assert tagged == [mtp, mtp, None, None, None, None]
    (m,) = load_measurements(_write_csv(tmp_path, rows[0]))
    assert any(note.startswith("speculative decoding assumed") for note in m.assumptions)


def test_missing_concurrency_and_node_rounding(tmp_path: Path) -> None:
    row = AGG_ROW | {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "concurrency": "", "tp_size": "4",
                     "attention_dp_size": "3", "moe_tp_size": "12", "moe_ep_size": "1", "batch_size": "5",
                     "gemm_quant_mode": "", "moe_quant_mode": ""}
    (m,) = load_measurements(_write_csv(tmp_path, row))
    assert m.model == "meta-llama/Meta-Llama-3.1-8B"
    assert (m.concurrency, m.layout["pools"][0]["batch"], m.scenario["cluster"]["gpus"]) == (15, 15, 16)
    assert m.scenario["precision"] == {"weights": "bf16", "experts": "bf16", "kv_cache": "bf16"}
    assert m.assumptions == ("concurrency missing: assumed batch_size x attention_dp_size = 15",)


def test_disaggregated_without_concurrency_or_batch_is_skipped(tmp_path: Path) -> None:
    row = {k: v for k, v in AGG_ROW.items() if not k.endswith("_size")} | {
        "id": "d", "mode": "disagg", "concurrency": "", "prefill_tp_size": "2", "decode_tp_size": "2"}
    assert load_measurements_with_skips(_write_csv(tmp_path, row)) == (
        [], [("d", "disaggregated row without concurrency or decode_batch_size")])


def test_unmapped_model_names_the_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="row r9: model_path 'acme/Unknown-7B'"):
        load_measurements(_write_csv(tmp_path, AGG_ROW | {"id": "r9", "model_path": "acme/Unknown-7B"}))


def test_unknown_group_key(tmp_path: Path) -> None:
    (m,) = load_measurements(_write_csv(tmp_path, AGG_ROW))
    assert [m.group(k) for k in ("model", "system", "engine", "serving")] == [
        "Qwen/Qwen3-32B", "h100-sxm", "trtllm", "aggregated"]
    assert m.group("campaign") == "trtllm 1.0 h100-sxm aggregated"  # one engine build, system and serving mode
    (unversioned,) = load_measurements(_write_csv(tmp_path, AGG_ROW | {"backend_version": ""}))
    assert unversioned.group("campaign") == "trtllm (none) h100-sxm aggregated"
    with pytest.raises(KeyError):
        m.group("precision")

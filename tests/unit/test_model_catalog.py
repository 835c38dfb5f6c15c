"""The bundled model catalog against shared/reference/models.md (Tables 1-3).

Parameter references: the recomputed "calc" figures of Table 1 where there is one, else the published
figures of Table 1/3 (see the notes beside each entry for the conventions). Tolerance 2%.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from costmodel.architecture import Architecture
from costmodel.errors import CatalogError, ConfigError
from costmodel.hf_config import parse_hf_config
from costmodel.models import aliases, load_model, model_ids
from costmodel.precision import Dtype

SHARED_MODELS = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "models"
DATA = Path(__file__).resolve().parents[2] / "costmodel" / "data" / "models"
B = 1e9


def _catalog_id(path: Path) -> str:
    """`org--repo.config.json` / `org--repo.reconstructed.json` -> `org/repo` (repo may contain dots)."""
    stem = path.name.removesuffix(".json").removesuffix(".config").removesuffix(".reconstructed")
    return stem.replace("--", "/", 1)


MIB = 2**20

# id -> (total, active) in params; active counts embedding + lm head (the "calc" convention).
PARAMS: dict[str, tuple[float, float]] = {
    "deepseek-ai/DeepSeek-V3": (671.0 * B, 37.4 * B),
    "deepseek-ai/DeepSeek-R1": (671.0 * B, 37.4 * B),
    "moonshotai/Kimi-K2-Instruct": (1026 * B, 32.7 * B),
    "moonshotai/Kimi-K2.5": (1026 * B, 32.7 * B),  # Table 3: the Kimi K2 text architecture
    "moonshotai/Kimi-Linear-48B-A3B-Instruct": (49.12 * B, 3.5 * B),
    "Qwen/Qwen3-235B-A22B": (235.1 * B, 22.1 * B),
    "Qwen/Qwen3-235B-A22B-FP8": (235.1 * B, 22.1 * B),
    "Qwen/Qwen3-30B-A3B": (30.5 * B, 3.3 * B),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (79.7 * B, 3.8 * B),
    "openai/gpt-oss-120b": (116.8 * B, 5.7 * B),
    "openai/gpt-oss-20b": (20.9 * B, 4.2 * B),
    "mistralai/Mixtral-8x7B-v0.1": (46.7 * B, 12.9 * B),
    "mistralai/Mixtral-8x22B-v0.1": (140.6 * B, 39.2 * B),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (400.7 * B, 17.2 * B),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (107.8 * B, 17.2 * B),
    "zai-org/GLM-4.5": (352.8 * B, 33.6 * B),
    "MiniMaxAI/MiniMax-M2.5": (228.7 * B, 11.0 * B),
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": (480 * B, 35 * B),  # Table 3, published
    "meta-llama/Meta-Llama-3.1-70B": (70.6 * B, 70.6 * B),
    "meta-llama/Meta-Llama-3.1-8B": (8.0 * B, 8.0 * B),
    "Qwen/Qwen3-32B": (32.8 * B, 32.8 * B),
}

# id -> (bf16, fp8) KV bytes per token, Table 2.
KV_BYTES: dict[str, tuple[int, int]] = {
    "deepseek-ai/DeepSeek-V3": (70_272, 35_136),
    "deepseek-ai/DeepSeek-R1": (70_272, 35_136),
    "deepseek-ai/DeepSeek-V3.2": (78_324, 48_068),
    "moonshotai/Kimi-K2-Instruct": (70_272, 35_136),
    "moonshotai/Kimi-K2.5": (70_272, 35_136),
    "moonshotai/Kimi-Linear-48B-A3B-Instruct": (8_064, 4_032),
    "Qwen/Qwen3-235B-A22B": (192_512, 96_256),
    "Qwen/Qwen3-30B-A3B": (98_304, 49_152),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (24_576, 12_288),
    "openai/gpt-oss-120b": (36_864, 18_432),
    "openai/gpt-oss-20b": (24_576, 12_288),
    "mistralai/Mixtral-8x7B-v0.1": (131_072, 65_536),
    "mistralai/Mixtral-8x22B-v0.1": (229_376, 114_688),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (49_152, 24_576),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (49_152, 24_576),
    "zai-org/GLM-4.5": (376_832, 188_416),
    "MiniMaxAI/MiniMax-M2.5": (253_952, 126_976),
}


@pytest.mark.parametrize("model_id", model_ids())
def test_every_bundled_model_parses(model_id: str) -> None:
    arch = load_model(model_id)
    assert arch.name == model_id
    assert arch.num_layers == len(arch.layers) > 0
    assert 0 < arch.active_params() <= arch.total_params()
    assert arch.kv_bytes_per_token(Dtype.BF16) > 0


def test_catalog_ids_come_from_the_bundled_file_names() -> None:
    names = {_catalog_id(p) for p in DATA.glob("*.json")}
    assert set(model_ids()) == names and len(names) == 25
    assert "zai-org/GLM-4.5" in model_ids()  # from a .reconstructed.json


@pytest.mark.parametrize("model_id", sorted(PARAMS))
def test_params_match_the_reference(model_id: str) -> None:
    total, active = PARAMS[model_id]
    arch = load_model(model_id)
    assert arch.total_params() == pytest.approx(total, rel=0.02)
    assert arch.active_params() == pytest.approx(active, rel=0.02)


def test_params_exact_where_a_weights_file_count_is_known() -> None:
    assert load_model("kimi-linear").total_params() == 49_122_681_728  # models.md: weights file count


def test_published_figures_of_table_3() -> None:
    assert load_model("kimi-k2.5").total_params() == pytest.approx(1.04e12, rel=0.02)
    qwen35 = load_model("qwen3.5")
    assert qwen35.total_params() == pytest.approx(397 * B, rel=0.02)
    # "A17B" is the active count rounded down (Qwen names truncate: Qwen3-Next-80B-A3B computes to
    # 3.87B); the exact count including embedding and head is 17.35B.
    assert 17 * B <= qwen35.active_params() < 18 * B
    # Zhipu's active figures leave out the embedding and lm head (GLM-4.5: 32B published, 33.6B calc).
    for alias, total, active in (("glm-5", 744 * B, 40 * B), ("glm-4.5", 355 * B, 32 * B)):
        arch = load_model(alias)
        assert arch.total_params() == pytest.approx(total, rel=0.02)
        assert arch.active_params() - arch.embedding_params() == pytest.approx(active, rel=0.02)


def test_deepseek_v32_is_v3_plus_the_indexer() -> None:
    v3, v32 = load_model("deepseek-v3"), load_model("deepseek-v3.2")
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64  # wq_b, wk, k_norm, weights_proj
    assert v32.total_params() - v3.total_params() == 61 * indexer
    assert v32.active_params() - v3.active_params() == 61 * indexer  # the indexer runs for every token
    assert v32.total_params() == pytest.approx(671 * B, rel=0.02)
    assert v32.layers[0].attention.index_topk == 2048


def test_deepseek_v3_headline_figures() -> None:
    arch = load_model("deepseek-v3")
    assert arch.total_params() == pytest.approx(671 * B, rel=0.005)
    assert arch.active_params() == pytest.approx(37 * B, rel=0.02)
    assert arch.kv_bytes_per_token(Dtype.BF16) == 70_272
    assert (arch.num_experts, arch.top_k, arch.moe_layers, arch.mtp_layers) == (256, 8, 58, 1)
    assert (arch.native_weights, arch.native_experts) == (Dtype.FP8, Dtype.FP8)
    assert arch.mtp_kv_bytes_per_token(Dtype.BF16) == 576 * 2


@pytest.mark.parametrize("model_id", sorted(KV_BYTES))
def test_kv_bytes_per_token_match_table_2(model_id: str) -> None:
    bf16, fp8 = KV_BYTES[model_id]
    arch = load_model(model_id)
    assert arch.kv_bytes_per_token(Dtype.BF16) == bf16
    assert arch.kv_bytes_per_token(Dtype.FP8) == fp8


@pytest.mark.parametrize(
    ("alias", "context", "expected"),
    [
        # recurrent states in bf16, as engines keep them (costmodel.precision.STATE_BYTES_PER_ELEMENT)
        ("kimi-linear", 10**6, 20 * 32 * 128 * 128 * 2 + 20 * 3 * 12288 * 2),  # 20 MiB + 1.4 MiB
        ("qwen3-next", 10**6, 36 * 32 * 128 * 128 * 2 + 36 * 3 * 8192 * 2),  # 36 MiB + 1.7 MiB
        ("gpt-oss-120b", 128, 4.5 * MIB),
        ("gpt-oss-120b", 10**6, 4.5 * MIB),
        ("gpt-oss-120b", 100, 18 * 100 * 1024 * 2),
        ("gpt-oss-20b", 10**5, 3.0 * MIB),
        ("llama4-maverick", 10**6, 1.125 * 2**30),
        ("llama4-scout", 8192, 1.125 * 2**30),
        ("deepseek-v3", 10**6, 0),
    ],
)
def test_per_sequence_state_matches_table_2(alias: str, context: int, expected: float) -> None:
    assert load_model(alias).state_bytes_per_sequence(context, Dtype.BF16) == expected


def test_state_figures_in_mib() -> None:
    kimi = load_model("kimi-linear").state_bytes_per_sequence(1, Dtype.BF16) / MIB
    qwen = load_model("qwen3-next").state_bytes_per_sequence(1, Dtype.BF16) / MIB
    assert kimi == pytest.approx(20 + 1.4, abs=0.01)
    assert qwen == pytest.approx(36 + 1.7, abs=0.02)


def test_layer_groups_deepseek_v3() -> None:
    groups = load_model("deepseek-v3").groups
    assert [(g.first_layer, len(g.layers), g.repeats) for g in groups] == [(0, 1, 3), (3, 1, 58)]
    assert [g.layers[0].ffn.kind for g in groups] == ["dense", "moe"]
    assert {g.layers[0].attention.kind for g in groups} == {"mla"}
    assert groups[0].layers[0].ffn.intermediate_size == 18432


def test_layer_groups_kimi_linear_three_kda_to_one_mla() -> None:
    arch = load_model("kimi-linear")
    main = max(arch.groups, key=lambda g: g.num_layers)
    assert [layer.attention.linear_kind or layer.attention.kind for layer in main.layers] == [
        "kda",
        "kda",
        "kda",
        "mla",
    ]
    assert main.repeats == 5
    full = [i + 1 for i, layer in enumerate(arch.layers) if layer.attention.kind == "mla"]
    assert full == [4, 8, 12, 16, 20, 24, 27]  # 1-based, as in linear_attn_config
    assert arch.layers[0].ffn.kind == "dense" and arch.moe_layers == 26


def test_layer_groups_gpt_oss() -> None:
    (group,) = load_model("gpt-oss-120b").groups
    assert group.repeats == 18
    assert [(layer.attention.window, layer.attention.is_full) for layer in group.layers] == [(128, False), (None, True)]
    assert group.layers[0].attention.sinks and group.layers[0].ffn.expert_bias


def test_layer_groups_llama4_maverick() -> None:
    (group,) = load_model("llama4-maverick").groups
    assert group.repeats == 12
    assert [layer.attention.chunk for layer in group.layers] == [8192, 8192, 8192, None]
    assert [layer.ffn.kind for layer in group.layers] == ["dense", "moe", "dense", "moe"]
    assert group.layers[0].ffn.intermediate_size == 16384
    moe = group.layers[1].ffn
    assert (moe.num_experts, moe.top_k, moe.num_shared_experts, moe.shared_intermediate_size) == (128, 1, 1, 8192)


def test_kimi_k3_arithmetic_by_hand() -> None:
    arch = load_model("kimi-k3")
    h, w = 7168, 96 * 128  # hidden, KDA width (96 heads x 128)
    kda = (
        h  # pre-norm
        + 3 * h * w  # q, k, v
        + 3 * w * 4  # depthwise short conv, kernel 4
        + 2 * h * w  # full-rank decay (f) and output (g) gates
        + h * 96  # beta (b_proj)
        + 96  # A_log
        + w  # dt_bias
        + 128  # gated output norm
        + w * h  # o_proj
    )
    mla = (
        h
        + (h * 1536 + 1536 + 1536 * 96 * 192)  # q_a, q_a_norm, q_b
        + (h * 576 + 512 + 512 * 96 * 256)  # kv_a, kv_a_norm, kv_b
        + 96 * 128 * h  # o_proj
        + h * 96 * 128  # output gate (mla_use_output_gate)
    )
    expert = 3 * 3584 * 3072  # latent experts: routed_expert_hidden_size x moe_intermediate_size
    moe_rest = h + 3 * h * 2 * 3072 + (896 * h + 896) + (2 * h * 3584 + 3584)  # norm, 2 shared, router, latent
    dense = h + 3 * h * 33792
    layers = {layer.attention.linear_kind or layer.attention.kind for layer in arch.layers}
    assert layers == {"kda", "mla"}
    kda_layer = next(layer for layer in arch.layers if layer.attention.kind == "linear")
    mla_layer = next(layer for layer in arch.layers if layer.attention.kind == "mla")
    assert kda_layer.attention.params() == kda
    assert mla_layer.attention.params() == mla
    assert mla_layer.ffn.routed_expert_params() == expert
    assert mla_layer.ffn.dense_params() == moe_rest
    assert arch.total_params() == 2 * 163840 * h + 69 * kda + 24 * mla + dense + 92 * (moe_rest + 896 * expert) + h
    assert arch.active_params() == arch.total_params() - 92 * (896 - 16) * expert
    assert arch.kv_bytes_per_token(Dtype.BF16) == 24 * 576 * 2
    assert arch.state_bytes_per_sequence(1, Dtype.BF16) == 69 * (96 * 128 * 128 * 2 + 3 * 3 * w * 2)
    assert (arch.native_weights, arch.native_experts) == (Dtype.BF16, Dtype.FP4)
    assert [(g.first_layer, len(g.layers), g.repeats) for g in arch.groups] == [(0, 4, 1), (4, 4, 22), (92, 1, 1)]


def test_native_formats() -> None:
    expected = {
        "gpt-oss-120b": (Dtype.BF16, Dtype.FP4),
        "kimi-k2": (Dtype.FP8, Dtype.FP8),
        "kimi-k2.5": (Dtype.BF16, Dtype.INT4),
        "qwen3-235b": (Dtype.BF16, Dtype.BF16),
        "qwen3-235b-fp8": (Dtype.FP8, Dtype.FP8),
        "minimax-m2.5": (Dtype.FP8, Dtype.FP8),
    }
    for alias, formats in expected.items():
        arch = load_model(alias)
        assert (arch.native_weights, arch.native_experts) == formats, alias


def test_mxfp4_experts_are_read_from_the_config_and_from_model_files_older_than_the_flag() -> None:
    for alias, mx in {"gpt-oss-120b": True, "kimi-k3": True, "kimi-k2.5": False, "deepseek-v3": False}.items():
        arch = load_model(alias)
        assert arch.native_experts_microscaled is mx, alias
        older = arch.model_dump(mode="json")
        del older["native_experts_microscaled"]  # a model file written before the flag: inferred from the size
        assert Architecture.model_validate(older) == arch, alias
    assert load_model("kimi-k3").native_expert_bytes == 0.53125  # e8m0 scales: one byte per 32


def test_mtp_modules() -> None:
    counts = {"deepseek-v3": 1, "glm-4.5": 1, "glm-5": 1, "qwen3.5": 1, "minimax-m2.5": 3, "kimi-k2": 0}
    for alias, count in counts.items():
        arch = load_model(alias)
        assert arch.mtp_layers == count, alias
        assert (arch.mtp_params() > 0) == (count > 0)


def test_aliases_and_case_insensitive_ids() -> None:
    table = aliases()
    wanted = [
        "deepseek-v3",
        "deepseek-r1",
        "deepseek-v3.2",
        "kimi-k2",
        "kimi-k2.5",
        "kimi-k3",
        "kimi-linear",
        "qwen3-235b",
        "qwen3-235b-fp8",
        "qwen3-30b",
        "qwen3-next",
        "qwen3.5",
        "qwen3-coder",
        "gpt-oss-120b",
        "gpt-oss-20b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "llama4-maverick",
        "llama4-scout",
        "llama3.1-70b",
        "llama3.1-8b",
        "qwen3-32b",
        "glm-4.5",
        "glm-5",
        "minimax-m2.5",
    ]
    assert set(table) == set(wanted)
    assert set(table.values()) == set(model_ids())
    assert load_model("DEEPSEEK-AI/deepseek-v3") is load_model("deepseek-v3")
    assert load_model("Kimi-K2.5").name == "moonshotai/Kimi-K2.5"


@pytest.mark.parametrize(("ref", "suggestion"), [("deepseek-v4", "deepseek-v3"), ("kimi-k4", "kimi-k")])
def test_unknown_model_suggests_close_matches(ref: str, suggestion: str) -> None:
    with pytest.raises(CatalogError) as info:
        load_model(ref)
    message = str(info.value)
    assert "Did you mean" in message and suggestion in message
    assert "config.json" in message


@pytest.mark.parametrize("model_id", model_ids())
def test_yaml_round_trip(model_id: str, tmp_path: Path) -> None:
    arch = load_model(model_id)
    text = yaml.safe_dump(arch.to_yaml_dict(), sort_keys=False)
    again = Architecture.model_validate(yaml.safe_load(text))
    assert again == arch
    assert again.total_params() == arch.total_params()
    path = tmp_path / "model.yaml"
    path.write_text(text, encoding="utf-8")
    assert load_model("model.yaml", base_dir=tmp_path) == arch


def test_load_by_path(tmp_path: Path) -> None:
    source = DATA / "deepseek-ai--DeepSeek-V3.config.json"
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    shutil.copy(source, folder / "config.json")
    by_file = load_model(str(folder / "config.json"))
    assert by_file.name == "DeepSeek-V3"
    assert by_file.groups == load_model("deepseek-v3").groups
    assert load_model("DeepSeek-V3", base_dir=tmp_path).groups == by_file.groups  # a folder
    assert load_model(str(source)).name == "deepseek-ai/DeepSeek-V3"


def test_bad_files_raise_catalog_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(CatalogError, match="cannot read"):
        load_model(str(broken))
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: x\ngroups: []\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a valid normalised model") as caught:  # at its key's line
        load_model(str(bad_yaml))
    assert (caught.value.path, caught.value.line) == (bad_yaml, 1)


def test_nested_text_config() -> None:
    k2, k25 = load_model("kimi-k2"), load_model("kimi-k2.5")
    assert k25.groups == k2.groups
    flat = json.loads((DATA / "deepseek-ai--DeepSeek-V3.config.json").read_text(encoding="utf-8"))
    nested = parse_hf_config({"model_type": "wrapper", "text_config": flat}, "nested")
    assert nested.groups == load_model("deepseek-v3").groups
    assert any("text_config" in note for note in nested.notes)


def test_reconstructed_configs_are_noted() -> None:
    assert any("reconstructed" in note for note in load_model("glm-4.5").notes)
    assert not any("reconstructed" in note for note in load_model("deepseek-v3").notes)


def test_shared_reference_configs_parse_like_the_bundled_copies() -> None:
    if not SHARED_MODELS.is_dir():
        pytest.skip("shared/reference/models is not present")
    files = sorted(SHARED_MODELS.glob("*.json"))
    assert files
    for path in files:
        arch = parse_hf_config(json.loads(path.read_text(encoding="utf-8")), "x")
        bundled = load_model(_catalog_id(path))
        assert arch.groups == bundled.groups, path.name
        assert arch.total_params() == bundled.total_params()

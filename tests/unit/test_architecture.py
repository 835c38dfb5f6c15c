"""The normalised architecture and the HF parser on small synthetic configs counted by hand."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from costmodel.architecture import Architecture, Attention, Ffn, Layer, LayerGroup, group_layers
from costmodel.errors import ConfigError
from costmodel.hf_config import parse_hf_config
from costmodel.precision import Dtype

H = 64  # hidden size of the synthetic configs


def _moe_config(**extra: Any) -> dict[str, Any]:
    """2-layer GQA MoE (Mixtral-style): 4 q heads, 2 kv heads x 16, 4 experts top-2 of width 32."""
    config: dict[str, Any] = {
        "model_type": "mixtral",
        "hidden_size": H,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "some_unknown_key": [1, 2, 3],  # ignored
    }
    config.update(extra)
    return config


def test_two_layer_gqa_moe_counted_by_hand() -> None:
    arch = parse_hf_config(_moe_config(), "tiny")
    attention = 64 * 64 + 2 * (64 * 32) + 64 * 64 + 64  # q, k + v, o, pre-norm
    expert = 3 * 64 * 32  # gate, up, down
    router = 4 * 64
    ffn_dense_part = 64 + router  # pre-norm + router
    embeddings = 2 * 100 * 64  # input table + lm head
    assert attention == 12352 and expert == 6144
    assert arch.total_params() == embeddings + 2 * (attention + ffn_dense_part + 4 * expert) + 64 == 87360
    assert arch.active_params() == embeddings + 2 * (attention + ffn_dense_part + 2 * expert) + 64 == 62784
    assert arch.expert_params() == 2 * 4 * expert
    assert arch.dense_params() == arch.total_params() - arch.expert_params()
    assert arch.kv_bytes_per_token(Dtype.BF16) == 2 * (2 * 2 * 16) * 2  # layers x (k+v) x bytes
    assert arch.kv_bytes_per_token(Dtype.FP8) == 2 * (2 * 2 * 16)
    assert (arch.num_layers, arch.moe_layers, arch.num_experts, arch.top_k) == (2, 2, 4, 2)
    assert [(g.repeats, len(g.layers)) for g in arch.groups] == [(2, 1)]
    assert (arch.native_weights, arch.native_experts) == (Dtype.BF16, Dtype.BF16)


def test_tied_embeddings_are_counted_once() -> None:
    untied = parse_hf_config(_moe_config(), "tiny")
    tied = parse_hf_config(_moe_config(tie_word_embeddings=True), "tiny")
    assert untied.total_params() - tied.total_params() == 100 * 64


def test_dense_model_has_no_experts() -> None:
    config = _moe_config(model_type="llama")
    del config["num_local_experts"], config["num_experts_per_tok"]
    arch = parse_hf_config(config, "dense")
    mlp = 3 * 64 * 32 + 64
    attention = 12352
    assert arch.total_params() == arch.active_params() == 2 * 100 * 64 + 2 * (attention + mlp) + 64
    assert (arch.moe_layers, arch.num_experts, arch.top_k) == (0, None, None)


def test_deepseek_style_mla_layer_counted_by_hand() -> None:
    config = {
        "model_type": "deepseek_v3",
        "hidden_size": H,
        "num_hidden_layers": 3,
        "vocab_size": 10,
        "num_attention_heads": 2,
        "q_lora_rank": 8,
        "kv_lora_rank": 4,
        "qk_nope_head_dim": 6,
        "qk_rope_head_dim": 2,
        "v_head_dim": 5,
        "intermediate_size": 20,
        "moe_intermediate_size": 7,
        "n_routed_experts": 3,
        "n_shared_experts": 1,
        "num_experts_per_tok": 1,
        "first_k_dense_replace": 1,
        "topk_method": "noaux_tc",
        "num_nextn_predict_layers": 1,
        "max_position_embeddings": 128,
    }
    arch = parse_hf_config(config, "mla")
    mla = arch.layers[0].attention
    q = 64 * 8 + 8 + 8 * 2 * (6 + 2)  # q_a_proj, q_a_layernorm, q_b_proj
    kv = 64 * (4 + 2) + 4 + 4 * 2 * (6 + 5)  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
    out = 2 * 5 * 64
    assert mla.params() == 64 + q + kv + out
    moe = arch.layers[1].ffn
    assert moe.routed_expert_params() == 3 * 64 * 7
    assert moe.dense_params() == 64 + 3 * 64 * 7 + (3 * 64 + 3)  # norm, shared, router + correction bias
    assert [(g.first_layer, g.repeats) for g in arch.groups] == [(0, 1), (1, 2)]
    assert mla.kv_elements_per_token() == 4 + 2
    assert arch.kv_bytes_per_token(Dtype.BF16) == 3 * 6 * 2
    assert arch.mtp_layers == 1 and arch.mtp_layer == arch.layers[-1]
    assert arch.mtp_params() == arch.layers[-1].params() + 2 * 64 * 64 + 3 * 64


def test_dsa_indexer_fp8_uses_the_packed_mla_layout() -> None:
    mla = Attention(
        kind="mla",
        hidden_size=7168,
        num_heads=128,
        num_kv_heads=1,
        head_dim=192,
        v_head_dim=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        index_heads=64,
        index_head_dim=128,
        index_topk=2048,
    )
    assert mla.indexer_key_bytes_per_token() == 128 + 4
    assert mla.kv_bytes_per_token(Dtype.BF16) == 576 * 2 + 132
    assert mla.kv_bytes_per_token(Dtype.FP8) == 512 + 4 * 4 + 64 * 2 + 132  # 656 + 132
    plain = mla.model_copy(update={"index_heads": None, "index_head_dim": None, "index_topk": None})
    assert plain.kv_bytes_per_token(Dtype.FP8) == 576


def test_window_and_linear_state() -> None:
    swa = Attention(kind="gqa", hidden_size=H, num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=16, window=8)
    assert swa.kv_elements_per_token() == 0
    assert swa.window_state_elements(5) == 5 * 64 and swa.window_state_elements(100) == 8 * 64
    gdn = Attention(
        kind="linear",
        hidden_size=H,
        num_heads=2,
        linear_kind="gated_deltanet",
        linear_k_heads=2,
        linear_v_heads=4,
        linear_k_head_dim=8,
        linear_v_head_dim=6,
        conv_kernel=4,
        output_gate=True,
    )
    assert gdn.kv_elements_per_token() == 0
    assert gdn.linear_state_elements() == 4 * 8 * 6
    assert gdn.conv_state_elements() == 3 * (2 * 2 * 8 + 4 * 6)
    qkv, z, ba = 64 * (2 * 16 + 24), 64 * 24, 64 * 2 * 4
    conv, out, norm, dt_a = (2 * 16 + 24) * 4, 24 * 64, 6, 2 * 4
    assert gdn.params() == 64 + qkv + z + ba + conv + out + norm + dt_a


def test_groups_prefer_the_phase_of_the_pattern() -> None:
    def layer(kind: str, moe: bool) -> Layer:
        if kind == "linear":
            att = Attention(
                kind="linear",
                hidden_size=H,
                num_heads=1,
                linear_kind="kda",
                linear_k_heads=1,
                linear_v_heads=1,
                linear_k_head_dim=8,
                linear_v_head_dim=8,
            )
        else:
            att = Attention(kind="gqa", hidden_size=H, num_heads=1, num_kv_heads=1, head_dim=8, v_head_dim=8)
        ffn = (
            Ffn(kind="moe", hidden_size=H, num_experts=2, top_k=1, expert_intermediate_size=4)
            if moe
            else Ffn(kind="dense", hidden_size=H, intermediate_size=4)
        )
        return Layer(attention=att, ffn=ffn)

    lin, full, lin_dense = layer("linear", True), layer("gqa", True), layer("linear", False)
    # Kimi-Linear shape: dense first layer, 3 linear : 1 full, 27 layers ending on a full layer.
    layers = [lin_dense, lin, lin, full] + [lin, lin, lin, full] * 5 + [lin, lin, full]
    groups = group_layers(layers)
    assert [(g.first_layer, g.layers, g.repeats) for g in groups] == [
        (0, (lin_dense, lin, lin, full), 1),
        (4, (lin, lin, lin, full), 5),
        (24, (lin,), 2),
        (26, (full,), 1),
    ]
    assert group_layers([lin_dense] * 3 + [lin] * 5)[1].repeats == 5
    assert sum(g.num_layers for g in groups) == len(layers)


def test_architecture_rejects_gaps_between_groups() -> None:
    arch = parse_hf_config(_moe_config(), "tiny")
    group = arch.groups[0]
    moved = LayerGroup(layers=group.layers, repeats=group.repeats, first_layer=1)
    with pytest.raises(ValidationError):
        Architecture.model_validate({**arch.to_yaml_dict(), "groups": [moved.model_dump()]})
    with pytest.raises(ValidationError):
        Architecture.model_validate({**arch.to_yaml_dict(), "extra_field": 1})


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"text_config": {k: v for k, v in _moe_config().items() if k != "hidden_size"}}, "text_config.hidden_size"),
        ({k: v for k, v in _moe_config().items() if k != "num_experts_per_tok"}, "num_experts_per_tok"),
        ({k: v for k, v in _moe_config().items() if k != "vocab_size"}, "vocab_size"),
        ({k: v for k, v in _moe_config().items() if k != "max_position_embeddings"}, "max_position_embeddings"),
        (_moe_config(num_attention_heads="4"), "num_attention_heads"),
        (_moe_config(num_hidden_layers=True), "num_hidden_layers"),
        (_moe_config(layer_types=["full_attention"]), "layer_types"),
        (_moe_config(layer_types=["full_attention", "mystery"]), "layer_types"),
        (_moe_config(text_config=[1]), "text_config"),
        (_moe_config(torch_dtype="int3"), "torch_dtype"),
        (_moe_config(n_group=3, topk_group=1), "n_group"),
        (_moe_config(n_group=2, topk_group=3), "topk_group"),
    ],
)
def test_parser_errors_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_hf_config(config, "bad")
    assert info.value.field == field
    assert field in str(info.value)


def test_group_limited_routing_is_read_from_n_group_and_topk_group() -> None:
    """DeepSeek-V3's n_group / topk_group (a token's experts from 4 of 8 groups); absent or 1: no limit."""
    ffn = parse_hf_config(_moe_config(n_group=2, topk_group=1), "grouped").layers[0].ffn
    assert (ffn.expert_groups, ffn.groups_per_token, ffn.group_limited) == (2, 1, True)
    for extra in ({}, {"n_group": 1, "topk_group": 1}, {"n_group": 2, "topk_group": 2}):
        assert not parse_hf_config(_moe_config(**extra), "free").layers[0].ffn.group_limited


def test_missing_field_message_says_what_it_means() -> None:
    config = {k: v for k, v in _moe_config().items() if k != "hidden_size"}
    with pytest.raises(ConfigError, match=r"hidden_size is missing: .*width"):
        parse_hf_config(config, "bad")


def test_kimi_layer_lists_must_cover_every_layer_once() -> None:
    config = _moe_config(
        kv_lora_rank=4,
        qk_nope_head_dim=4,
        qk_rope_head_dim=2,
        v_head_dim=4,
        linear_attn_config={"kda_layers": [1], "full_attn_layers": [1], "num_heads": 2, "head_dim": 8},
    )
    with pytest.raises(ConfigError, match="1-based") as info:
        parse_hf_config(config, "bad")
    assert info.value.field == "linear_attn_config.kda_layers"


def test_inconsistent_values_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="num_experts_per_tok is 9, more than the 4 routed experts") as caught:
        parse_hf_config(_moe_config(num_experts_per_tok=9), "bad")
    assert caught.value.field == "num_experts_per_tok"  # the key, for its line in the file


def test_mlp_only_layers_beyond_the_model_are_refused() -> None:
    """An index past the last layer marks nothing the model has: most likely another model's list."""
    with pytest.raises(ConfigError, match="mlp_only_layers lists layer 99, beyond the model's") as caught:
        parse_hf_config(_moe_config(mlp_only_layers=[0, 99]), "bad")
    assert caught.value.field == "mlp_only_layers"


def test_quantization_formats() -> None:
    fp8 = parse_hf_config(_moe_config(quantization_config={"quant_method": "fp8"}), "q")
    assert (fp8.native_weights, fp8.native_experts) == (Dtype.FP8, Dtype.FP8)
    mx = parse_hf_config(_moe_config(quantization_config={"quant_method": "mxfp4"}), "q")
    assert (mx.native_weights, mx.native_experts) == (Dtype.BF16, Dtype.FP4)
    odd = parse_hf_config(_moe_config(quantization_config={"quant_method": "exotic"}), "q")
    assert odd.native_weights is Dtype.BF16 and any("exotic" in note for note in odd.notes)

"""Write the adversarial corpus of issue 14 into this folder (`python tests/property/adversarial/make_corpus.py`).

The files are committed; this script says how each was made. `expected.yaml` lists what `plan` must answer
for each (exit code and a phrase of the message); `tests/property/test_adversarial.py` runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
BASE = """schema_version: 1
name: adversarial
model: deepseek-v3
precision: {weights: fp8, kv_cache: fp8}
cluster: {system: h200-sxm, gpus: 8}
workload: {input_tokens: 1024, output_tokens: 256}
"""
SESSIONS = "{input_tokens: 1024, output_tokens: 256, sessions: {arrival_rate_per_s: 1.0, turns: 8, %s}}"
LAYOUT = ("serving: aggregated\npools:\n"
          "  - {role: mixed, replicas: 1, tp: 1, dp_attention: 8, moe_tp: 1, moe_ep: 8, batch: %s}\n")
HF = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
      "torch_dtype": "bfloat16"}
BIG = 10**30


def write(name: str, text: str | bytes) -> None:
    path = HERE / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def scenario(file: str, **sections: str) -> None:
    """BASE with whole top-level sections replaced (flow YAML given as text)."""
    lines = [line for line in BASE.splitlines() if line.split(":", 1)[0] not in sections]
    write(file, "\n".join(lines + [f"{key}: {value}" for key, value in sections.items()]) + "\n")


def billion_laughs(leaf: str) -> str:
    """Ten anchors, each a list of nine aliases of the one before: 9^10 leaves once expanded."""
    text = f"x0: &a [{', '.join([leaf] * 9)}]\n"
    for i in range(1, 10):
        previous, current = chr(ord("a") + i - 1), chr(ord("a") + i)
        text += f"x{i}: &{current} [" + ", ".join(["*" + previous] * 9) + "]\n"
    return text


def yaml_structure() -> None:
    write("complex-key.yaml", "? [a, b]\n: 1\n")
    write("complex-key-in-cluster.yaml", BASE.replace("gpus: 8}", "gpus: 8, ? {a: 1}: 1}"))
    write("deep-flow-list.yaml", "name: " + "[" * 50_000 + "\n")
    write("deep-flow-mapping.yaml", "a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n")
    write("deep-block-mapping.yaml", "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v\n")
    write("alias-bomb-name.yaml", billion_laughs("lol") + BASE.replace("name: adversarial", "name: *j"))
    write("alias-bomb-search-tp.yaml", billion_laughs("1") + BASE + "search: {tp: *j}\n")
    write("alias-self-reference.yaml", "a: &a [*a]\n")
    write("alias-bomb-layout.yaml", billion_laughs("lol") + "serving: aggregated\npools: *j\n")
    write("non-utf8-byte.yaml", BASE.replace("name: adversarial", "name: adv\xe9rsarial").encode("latin-1"))
    write("int-5000-digits.yaml", BASE.replace("gpus: 8", "gpus: " + "9" * 5000))
    write("empty.yaml", "")
    write("scalar-document.yaml", "42\n")


def models() -> None:
    scenario("model-nosuchuser.yaml", model="~nosuchuser/config.json")
    scenario("model-long-path.yaml", model="m" * 300 + "/config.json")
    scenario("model-long-components.yaml", model=("d" * 255 + "/") * 15 + "config.json")
    scenario("model-dev-zero.yaml", model="/dev/zero")
    scenario("model-hf-huge-layers.yaml", model="hf-huge-layers.json")
    scenario("model-hf-zero-experts.yaml", model="hf-zero-experts.json")
    scenario("model-hf-kv-heads-5.yaml", model="hf-kv-heads-5.json")
    scenario("model-hf-nan.yaml", model="hf-nan.json")
    scenario("model-hf-deep.yaml", model="hf-deep.json")
    scenario("model-yaml-alias-bomb.yaml", model="model-alias-bomb.yaml")
    write("model-alias-bomb.yaml", billion_laughs("lol"))
    write("hf-huge-layers.json", json.dumps({**HF, "num_hidden_layers": BIG}))
    write("hf-zero-experts.json", json.dumps({**HF, "num_local_experts": 0, "num_experts_per_tok": 2}))
    write("hf-kv-heads-5.json", json.dumps({**HF, "num_key_value_heads": 5}))
    write("hf-huge-hidden.json", json.dumps({**HF, "hidden_size": 1e300}))
    write("hf-nan.json", json.dumps(HF)[:-1] + ', "rope_theta": NaN}')
    write("hf-deep.json", "[" * 100_000)


def numbers() -> None:
    scenario("gpus-1e30.yaml", cluster=f"{{system: h200-sxm, gpus: {BIG}}}")
    scenario("gpus-1000000.yaml", cluster="{system: h200-sxm, gpus: 1000000}")
    scenario("nodes-1e30.yaml", cluster=f"{{system: h200-sxm, nodes: {BIG}}}")
    scenario("racks-5000.yaml", cluster="{system: gb200-nvl72, racks: 5000}")
    scenario("gpus-inf.yaml", cluster="{system: h200-sxm, gpus: .inf}")
    scenario("gpus-1e400.yaml", cluster="{system: h200-sxm, gpus: 1e400}")
    scenario("seed-2-31.yaml", search="{seed: 2147483648}")
    scenario("threads-1e30.yaml", search=f"{{threads: {BIG}}}")
    scenario("threads-100000.yaml", search="{threads: 100000}")
    scenario("redundant-experts-1e8.yaml", search="{redundant_experts: 100000000}")
    scenario("redundant-experts-1000.yaml", search="{redundant_experts: 1000}")
    scenario("redundant-experts-float.yaml", search="{redundant_experts: 1e8}")
    ones = ", ".join(["1"] * 1000)
    scenario("tp-list-1000.yaml", search=f"{{tp: [{ones}]}}")
    scenario("time-limit-inf.yaml", search="{time_limit_s: .inf}")
    scenario("max-batch-1e30.yaml", search=f"{{max_batch: {BIG}}}")
    scenario("schema-version-true.yaml", schema_version="true")
    scenario("schema-version-float.yaml", schema_version="1.0")
    scenario("name-too-long.yaml", name="n" * 300)
    scenario("input-tokens-1e30.yaml", workload=f"{{input_tokens: {BIG}, output_tokens: 256}}")
    scenario("input-tokens-nan.yaml", workload="{input_tokens: .nan, output_tokens: 256}")
    scenario("arrival-rate-subnormal.yaml",
             workload="{input_tokens: 1024, output_tokens: 256, arrival_rate_per_s: 1e-320}")
    scenario("prefix-hit-rate-1.yaml",
             workload="{input_tokens: 1024, output_tokens: 256, prefix_hit_rate: 1.0, cached_tokens: 10000}")
    scenario("concurrency-1e30.yaml", workload=f"{{input_tokens: 1024, output_tokens: 256, concurrency: {BIG}}}")
    scenario("think-time-inf.yaml", workload=SESSIONS % "think_time_s: .inf")
    scenario("think-time-1e308.yaml", workload=SESSIONS % "think_time_s: 1e308")
    scenario("pause-nan.yaml", workload=SESSIONS % "pause_s: .nan")
    scenario("turns-1e9.yaml", workload=SESSIONS.replace("turns: 8, ", "") % "turns: 1000000000")
    scenario("slo-ttft-inf.yaml", slo="{ttft_ms: .inf}")
    overrides = "{system: h200-sxm, gpus: 8, overrides: {%s}}"
    scenario("hbm-bandwidth-1e-300.yaml", cluster=overrides % "hbm_bandwidth_bytes_per_s: 1e-300")
    scenario("hbm-capacity-neg-inf.yaml", cluster=overrides % "hbm_capacity_bytes: -.inf")
    scenario("latency-1e308.yaml", cluster=overrides % "network_latency_s: 1e308")
    scenario("flops-override-inf.yaml", cluster=overrides % "peak_flops_per_s: {fp8: .inf}")
    scenario("flops-override-unknown-format.yaml", cluster=overrides % "peak_flops_per_s: {fp6: 1.0e+15}")
    scenario("kv-store-inf.yaml",
             cluster="{system: h200-sxm, gpus: 8, kv_store: {capacity_bytes: .inf, bandwidth_bytes_per_s: 1.0e+11}}")
    scenario("ok-flops-override.yaml", cluster=overrides % "peak_flops_per_s: {fp8: 2.0e+15}")
    scenario("ok-extreme-sessions.yaml",
             workload=SESSIONS % "think_time_s: 3.0e+7, pause_s: 3.0e+7, pause_probability: 0.5")


def layouts() -> None:
    write("layout-batch-1e30.yaml", LAYOUT % BIG)
    write("layout-batch-inf.yaml", LAYOUT % ".inf")
    write("layout-replicas-1e30.yaml", (LAYOUT % 64).replace("replicas: 1", f"replicas: {BIG}"))
    write("layout-schema-version-true.yaml", "schema_version: true\n" + LAYOUT % 64)
    write("layout-complex-key.yaml", LAYOUT % 64 + "? [x]\n: 1\n")
    write("ok-layout.yaml", LAYOUT % 64)


def infeasible() -> None:
    write("infeasible-long-context-2xh100.yaml", """schema_version: 1
name: long-context-2xh100
model: llama4-scout
precision: {weights: fp8}
cluster: {system: h100-sxm, gpus: 2}
workload: {input_tokens: 1000000, output_tokens: 1000}
search: {time_limit_s: 20}
""")
    write("infeasible-disaggregated-1gpu.yaml", """schema_version: 1
name: disaggregated-on-one-gpu
model: qwen3-30b
cluster: {system: h100-sxm, gpus: 1}
workload: {input_tokens: 1024, output_tokens: 256}
slo: {ttft_ms: 2000}
search: {serving: [disaggregated], time_limit_s: 20}
""")


def cases() -> None:
    """A JSONL batch whose good lines (1, 17, 18) surround poison ones: each must get its own answer."""
    base = {"schema_version": 1, "name": "c", "model": "deepseek-v3",
            "precision": {"weights": "fp8", "kv_cache": "fp8"}, "cluster": {"system": "h200-sxm", "gpus": 8},
            "workload": {"input_tokens": 1024, "output_tokens": 256}}
    layout = {"serving": "aggregated", "pools": [{"role": "mixed", "replicas": 1, "tp": 1, "dp_attention": 8, "pp": 1,
                                                  "moe_tp": 1, "moe_ep": 8, "batch": 64}]}

    def case(**changes: object) -> bytes:
        return json.dumps({"scenario": {**base, **changes}, "layout": layout}).encode()

    sessions = {"input_tokens": 1024, "output_tokens": 256,
                "sessions": {"arrival_rate_per_s": 1, "turns": 4, "think_time_s": 1e308}}
    lines = [case(), b"[" * 50_000, case(model="~nosuchuser/config.json"), case(model="a" * 300),
             case(search={"redundant_experts": 100_000_000}), case()[:-3] + b"\xff}}}",
             b'{"scenario": 1e999, "layout": {}}', b'{"scenario": NaN, "layout": Infinity}', case(workload=sessions),
             case(cluster={"system": "h200-sxm", "gpus": 8, "overrides": {"hbm_bandwidth_bytes_per_s": 1e-300}}),
             case(cluster={"system": "h200-sxm", "gpus": BIG}), b'"just a string"', b"{not json", b"9" * 5000,
             case(model="hf-huge-layers.json"), case(model="/dev/zero"),
             case(cluster={"system": "h200-sxm", "gpus": 8, "overrides": {"peak_flops_per_s": {"fp8": 2e15}}}),
             case()]
    write("cases-poison.jsonl", b"\n".join(lines) + b"\n")


if __name__ == "__main__":
    yaml_structure()
    models()
    numbers()
    layouts()
    infeasible()
    cases()

"""`plan export`: every flag and config key written is one the pinned engine release defines.

Plans under `plans/` are points of the bundled examples' fronts (`plan solve --out`, 20 s limit), chosen
to cover aggregated and disaggregated serving, pipeline stages, attention DP with and without TP,
expert TP, instances over several nodes and a sessions workload with KV tiers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.evaluate import pool_context
from costmodel.layout import Layout
from costmodel.serving import ENGINE_STEP_TOKENS
from planner.export import ENGINE_VERSIONS, Plan, export_plan, load_plan
from planner.export.base import expert_slots, moe_layer_indices
from planner.export.sglang import NO_DEEPEP, NO_EXPERT_LOCATION
from planner.export.vllm import NO_EPLB
from tests.export.engine_check import check_args, check_every_engine, check_trtllm_options, definitions, flags_of

PLANS = sorted((Path(__file__).parent / "plans").glob("*.yaml"))
DYNAMO_FLAGS = {
    "trtllm": ("dynamo:trtllm", "dynamo:common"),
    "sglang": ("sglang", "dynamo:sglang", "dynamo:common"),
    "vllm": ("vllm", "dynamo:vllm", "dynamo:common"),
}


@pytest.fixture(scope="module", params=PLANS, ids=lambda p: p.stem)
def plan(request: pytest.FixtureRequest) -> Plan:
    return load_plan(request.param)


def test_definitions_are_the_pinned_releases() -> None:
    for engine in ("sglang", "vllm", "dynamo"):
        data = definitions(engine)
        assert (data["package"], data["version"]) == ENGINE_VERSIONS[engine]
        assert data["wheel"].startswith(data["package"].replace("-", "_") + "-" + data["version"])
    assert definitions("trtllm")["engine"] == "{}=={}".format(*ENGINE_VERSIONS["trtllm"])


def test_sglang_flags_are_defined(plan: Plan) -> None:
    for commands in export_plan(plan, "sglang").commands.values():
        for command in commands:
            assert command.program == ("python3", "-m", "sglang.launch_server")
            assert check_args(command.args, flags_of("sglang")) == []


def test_vllm_flags_are_defined(plan: Plan) -> None:
    for commands in export_plan(plan, "vllm").commands.values():
        for command in commands:
            assert command.program == ("vllm", "serve")
            assert command.args[0] == plan.model
            assert check_args(command.args, flags_of("vllm"), positionals=1) == []


def test_trtllm_options_are_known_keys(plan: Plan) -> None:
    exported = export_plan(plan, "trtllm")
    options = {name: data for name, data in exported.configs.items() if not name.startswith("trtllm-eplb-")}
    assert len(options) == len(plan.pools)
    for data in options.values():
        assert check_trtllm_options(data) == []


def test_trtllm_options_match_the_plan(plan: Plan) -> None:
    exported = export_plan(plan, "trtllm")
    for pool in plan.pools:
        data = exported.configs[f"trtllm-{pool.name}.yaml"]
        assert data["tensor_parallel_size"] * data["pipeline_parallel_size"] == pool.gpus_per_instance
        assert data["moe_expert_parallel_size"] * data["moe_tensor_parallel_size"] == pool.gpus_per_stage
        assert data["enable_attention_dp"] == (pool.dp_attention > 1)
        ranks = pool.dp_attention if data["enable_attention_dp"] else 1
        assert data["max_batch_size"] * ranks >= pool.batch


def test_trtllm_load_balancer_holds_every_expert(plan: Plan) -> None:
    exported = export_plan(plan, "trtllm")
    experts = plan.resolved.architecture.num_experts
    for pool in plan.pools:
        balancer = exported.configs.get(f"trtllm-eplb-{pool.name}.yaml")
        if pool.moe_ep == 1 or pool.banks is None:
            assert balancer is None
            continue
        assert balancer is not None and balancer["num_slots"] % pool.moe_ep == 0
        assert sorted(balancer["initial_global_assignments"]) == moe_layer_indices(plan)
        for slots in balancer["initial_global_assignments"].values():
            assert len(slots) == balancer["num_slots"]
            assert set(slots) == set(range(experts or 0))
        options = exported.configs[f"trtllm-{pool.name}.yaml"]
        assert options["moe_config"]["load_balancer"].endswith(f"trtllm-eplb-{pool.name}.yaml")


def test_sglang_expert_location_is_the_plans_banks(plan: Plan) -> None:
    exported = export_plan(plan, "sglang")
    experts = plan.resolved.architecture.num_experts or 0
    for pool in plan.pools:
        args = list(exported.commands[pool.name][0].args)
        name = f"sglang-expert-location-{pool.name}.json"
        unread = plan.resolved.architecture.model_type in NO_EXPERT_LOCATION  # SGLang's model code reads no map
        if expert_slots(pool) is None or unread:
            assert name not in exported.files and "--init-expert-location" not in args
            assert unread <= any("reads no --init-expert-location" in note for note in exported.unexpressed)
            continue
        location = yaml.safe_load(exported.files[name])["physical_to_logical_map"]
        redundant = int(args[args.index("--ep-num-redundant-experts") + 1])
        assert len(location) == plan.resolved.architecture.num_layers
        assert all(len(row) == experts + redundant and set(row) == set(range(experts)) for row in location)
        width = len(location[0]) // pool.moe_ep
        assert pool.banks is not None
        for rank, banks in enumerate(pool.banks["gpu_experts"]):
            assert location[0][rank * width: rank * width + len(banks)] == banks


@pytest.mark.parametrize("backend", ["trtllm", "sglang", "vllm"])
def test_dynamo_worker_args_are_defined(plan: Plan, backend: str) -> None:
    documents = export_plan(plan, "dynamo", backend).configs["dynamo-deployment.yaml"]["documents"]
    services = documents[-1]["spec"]["services"]
    frontend = services.pop("Frontend")["extraPodSpec"]["mainContainer"]
    assert check_args(frontend["args"], flags_of("dynamo:frontend", "dynamo:common")) == []
    assert set(services) == {pool.name for pool in plan.pools}
    for service in services.values():
        container = service["extraPodSpec"]["mainContainer"]
        assert container["command"] == ["python3", "-m", f"dynamo.{backend}"]
        assert check_args(container["args"], flags_of(*DYNAMO_FLAGS[backend])) == []
        assert not any("${" in arg for arg in container["args"])  # Kubernetes does not expand shell variables
    if backend == "trtllm":
        for name, text in documents[0]["data"].items():
            if not name.startswith("trtllm-eplb-"):
                assert check_trtllm_options(yaml.safe_load(text)) == []


def test_dynamo_services_hold_the_plans_gpus(plan: Plan) -> None:
    documents = export_plan(plan, "dynamo").configs["dynamo-deployment.yaml"]["documents"]
    workers = [s for s in documents[-1]["spec"]["services"].values() if s["componentType"] == "worker"]
    gpus = sum(s["replicas"] * s.get("multinode", {}).get("nodeCount", 1) * int(s["resources"]["limits"]["gpu"])
               for s in workers)
    assert gpus == sum(p.replicas * p.gpus_per_instance for p in plan.pools)


def _key_paths(data: Any, prefix: str = "") -> set[str]:
    """Key paths with list items as `[]` and the names of services, ConfigMap files and envs as `*`."""
    if isinstance(data, list):
        return set().union(*(_key_paths(item, prefix + "[]") for item in data)) if data else set()
    if not isinstance(data, dict):
        return set()
    paths = set()
    for key, value in data.items():
        name = "*" if prefix in (".spec.services", ".data") else key
        paths.add(f"{prefix}.{name}")
        if prefix != ".data":
            paths |= _key_paths(value, f"{prefix}.{name}")
    return paths


@pytest.mark.parametrize("backend", ["trtllm", "sglang", "vllm"])
def test_dynamo_manifest_uses_the_reference_structure(plan: Plan, backend: str, shared_dir: Path) -> None:
    """Every key of the manifest appears, at the same place, in Dynamo's own example manifests."""
    reference: dict[str, set[str]] = {}
    for path in sorted(shared_dir.glob("reference/engines/dynamo-*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            reference.setdefault(document["kind"], set()).update(_key_paths(document))
    assert reference.get("DynamoGraphDeployment"), "no DynamoGraphDeployment among the references"
    documents = export_plan(plan, "dynamo", backend).configs["dynamo-deployment.yaml"]["documents"]
    for document in documents:
        assert _key_paths(document) - reference[document["kind"]] == set()
    assert documents[-1]["apiVersion"] == "nvidia.com/v1alpha1"
    assert documents[-1]["spec"]["backendFramework"] == backend


def test_cpu_weight_offload_is_passed_where_the_engine_has_it(tmp_path: Path) -> None:
    """`cpu_offload_gb` (a layout the user wrote: the planner does not choose offload) becomes SGLang's and
    vLLM's --cpu-offload-gb (SGLang's in whole GiB, rounded up); TensorRT-LLM has none and says so."""
    data = yaml.safe_load((Path(__file__).parent / "plans" / "deepseek-v3-8xh200-plan-0.yaml").read_text())
    for pool in data["layout"]["pools"]:
        pool["cpu_offload_gb"] = 12.5
    path = tmp_path / "offload.yaml"
    path.write_text(yaml.safe_dump(data))
    plan = load_plan(path)
    sglang = [c.args for commands in export_plan(plan, "sglang").commands.values() for c in commands]
    vllm = [c.args for commands in export_plan(plan, "vllm").commands.values() for c in commands]
    assert sglang and all(args[args.index("--cpu-offload-gb") + 1] == "13" for args in sglang)
    assert vllm and all(args[args.index("--cpu-offload-gb") + 1] == "12.5" for args in vllm)
    assert all(check_args(args, flags_of("sglang")) == [] for args in sglang)
    assert all(check_args(args, flags_of("vllm"), positionals=1) == [] for args in vllm)
    assert any("no CPU weight offload" in note for note in export_plan(plan, "trtllm").unexpressed)


def test_sglang_prefill_batches_are_what_the_cost_model_prices(plan: Plan) -> None:
    """--chunked-prefill-size, which SGLang divides among attention-DP ranks, gives each rank the prompt
    tokens per step the cost model prices: an aggregated pool's prefill batch (`pool_context`), a prefill
    pool's ENGINE_STEP_TOKENS."""
    commands = export_plan(plan, "sglang").commands
    for index, pool in enumerate(plan.pools):
        args = commands[pool.name][0].args
        per_rank = int(args[args.index("--chunked-prefill-size") + 1]) / pool.dp_attention
        layout_pool = Layout.model_validate(plan.data["layout"]).pools[index]
        sglang = plan.resolved.scenario.model_copy(update={"engine": "sglang"})
        ctx = pool_context(dataclasses.replace(plan.resolved, scenario=sglang), layout_pool)
        expected = {"aggregated": ctx.prefill_batch_tokens, "prefill": float(ENGINE_STEP_TOKENS)}.get(
            pool.engine_role)
        if expected is not None:
            assert per_rank == expected


def test_a_prefill_batch_beyond_sglangs_admission_cap_raises_it() -> None:
    """SGLang also caps a rank's prefill batch at --max-prefill-tokens (16384 by default): a larger
    `prefill_batch_tokens` raises it, so the launch runs the batch the model prices."""
    plan = load_plan(Path(__file__).parent / "plans" / "gpt-oss-120b-8xb200-plan-24.yaml")
    scenario = plan.resolved.scenario.model_copy(update={"engine": "sglang", "prefill_batch_tokens": 32768})
    plan = dataclasses.replace(plan, resolved=dataclasses.replace(plan.resolved, scenario=scenario))
    for pool in plan.pools:
        args = export_plan(plan, "sglang").commands[pool.name][0].args
        assert check_args(args, flags_of("sglang")) == []
        if pool.engine_role == "aggregated":
            assert args[args.index("--max-prefill-tokens") + 1] == "32768"
            assert args[args.index("--chunked-prefill-size") + 1] == str(32768 * pool.dp_attention)


def _with_speculation(plan: Plan, **speculative: Any) -> Plan:
    workload = plan.resolved.scenario.workload
    spec = workload.speculative.model_copy(update=speculative)
    scenario = plan.resolved.scenario.model_copy(update={"workload": workload.model_copy(update={"speculative": spec})})
    return dataclasses.replace(plan, resolved=dataclasses.replace(plan.resolved, scenario=scenario))


def _mtp_plan(name: str, **architecture: Any) -> Plan:
    plan = _with_speculation(load_plan(Path(__file__).parent / "plans" / name), method="mtp", draft_tokens=2)
    arch = plan.resolved.architecture.model_copy(update=architecture)
    return dataclasses.replace(plan, resolved=dataclasses.replace(plan.resolved, architecture=arch))


def _speculative_words(plan: Plan, engine: str) -> list[list[str]]:
    return [[w for w in command.args if w.startswith("--speculative")]
            for commands in export_plan(plan, engine).commands.values() for command in commands]


SGLANG_MTP = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "3"]


@pytest.mark.parametrize("name", ["deepseek-v3-8xh200-plan-18.yaml", "coding-agent-sessions-gb200-plan-6.yaml"])
def test_mtp_the_plan_prices_is_launched_by_every_engine(name: str) -> None:
    """A plan priced with MTP (two draft tokens), aggregated or disaggregated, launches MTP on every pool of
    every engine, with flags the pinned releases define; without speculation none is written."""
    plan = _mtp_plan(name)
    for commands in export_plan(plan, "sglang").commands.values():
        for command in commands:
            args = list(command.args)
            at = args.index("--speculative-algorithm")
            assert args[at:at + 8] == SGLANG_MTP
    for commands in export_plan(plan, "vllm").commands.values():
        for command in commands:
            config = command.args[command.args.index("--speculative-config") + 1]
            assert yaml.safe_load(config) == {"method": "mtp", "num_speculative_tokens": 2}
    for name_, options in export_plan(plan, "trtllm").configs.items():
        if not name_.startswith("trtllm-eplb-"):
            assert options["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    checked, problems = check_every_engine(plan)  # every flag defined, Dynamo's workers with each backend too
    assert checked > 0 and problems == []
    notes = [note for engine in ("sglang", "vllm") for note in export_plan(plan, engine).unexpressed]
    assert not any("MTP is priced" in note for note in notes)
    base = load_plan(Path(__file__).parent / "plans" / name)
    assert all(words == [] for engine in ("sglang", "vllm") for words in _speculative_words(base, engine))


def test_mtp_an_engine_cannot_run_is_said_not_launched() -> None:
    """SGLang runs MTP beside pipeline stages on prefill servers only, and neither SGLang nor vLLM has an MTP
    drafter for MiniMax-M2: those pools launch without the flags and their exports say why."""
    staged = _mtp_plan("deepseek-v3-8xh200-plan-0.yaml")  # aggregated, pp 2
    assert _speculative_words(staged, "sglang") == [[]]
    assert any("pipeline stages on prefill servers only" in n for n in export_plan(staged, "sglang").unexpressed)
    assert all(words for words in _speculative_words(staged, "vllm"))
    minimax = _mtp_plan("deepseek-v3-8xh200-plan-18.yaml", model_type="minimax_m2")
    for engine in ("sglang", "vllm"):
        assert all(words == [] for words in _speculative_words(minimax, engine))
        assert any("no MTP drafter for model type minimax_m2" in n for n in export_plan(minimax, engine).unexpressed)
    assert any("no MTP drafter" in n for n in export_plan(minimax, "dynamo", "sglang").unexpressed)


def test_deepep_buffers_too_small_for_a_decode_step_are_said() -> None:
    """A decode pool of 64 sequences per rank verifying 3 tokens each dispatches 192 tokens per rank, beyond
    DeepEP's default 128 in SGLang: the export says which environment variable to raise."""
    plan = _mtp_plan("deepseek-v3-16x-gb200-nvl72-plan-0.yaml")
    notes = export_plan(plan, "sglang").unexpressed
    assert any("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=192" in note for note in notes)
    plain = load_plan(Path(__file__).parent / "plans" / "deepseek-v3-16x-gb200-nvl72-plan-0.yaml")
    assert not any("DEEPEP" in note for note in export_plan(plain, "sglang").unexpressed)  # 64 tokens per rank


def test_a_draft_model_the_scenario_cannot_name_is_said() -> None:
    """`method: draft` is priced, but no field names the draft model: every engine's export says so and
    writes no speculative setting."""
    plan = _with_speculation(load_plan(Path(__file__).parent / "plans" / "deepseek-v3-8xh200-plan-18.yaml"),
                             method="draft", draft_tokens=3)
    for engine in ("trtllm", "sglang", "vllm", "dynamo"):
        out = export_plan(plan, engine)
        assert any("names no draft model" in note for note in out.unexpressed), engine
        assert any("names no draft model" in text for text in out.files.values()), engine
        lines = [line for text in out.files.values() for line in text.splitlines()]
        assert not any("speculative" in line.split("#")[0] for line in lines), engine


def test_sglang_keeps_a_moe_models_dense_layers_on_each_attention_dp_rank(plan: Plan) -> None:
    """The plan prices dense FFN layers split like attention (on each attention-DP rank); SGLang runs them over
    the whole stage unless --moe-dense-tp-size 1, its only other value, so that is launched where attention is
    not tensor-parallel, and said where it is."""
    dense_layers = any(layer.ffn.kind == "dense" for layer in plan.resolved.architecture.layers)
    exported = export_plan(plan, "sglang")
    for pool in plan.pools:
        args = list(exported.commands[pool.name][0].args)
        launched = "--moe-dense-tp-size" in args and args[args.index("--moe-dense-tp-size") + 1] == "1"
        assert launched == (pool.dp_attention > 1 and pool.tp == 1 and dense_layers), (pool.name, args)
        said = any("dense FFN layers over all" in note for note in exported.unexpressed)
        assert said >= (pool.dp_attention > 1 and pool.tp > 1 and dense_layers)


def test_a_dense_models_attention_dp_ranks_launch_as_sglang_replicas(tmp_path: Path) -> None:
    """A dense model's attention-DP ranks share nothing and are priced as replicas: SGLang's data-parallel
    workers of tp GPUs each (its dense models have no DP attention), each with its share of the batch."""
    data = yaml.safe_load((Path(__file__).parent / "plans" / "deepseek-v3-8xh200-plan-0.yaml").read_text())
    data["scenario"]["model"] = "llama3.1-70b"
    data["layout"]["pools"][0].update(tp=2, dp_attention=2, pp=2, moe_tp=4, moe_ep=1, batch=9)
    data.pop("expert_banks", None)
    data["placement"]["pools"][0].pop("stages")  # the other model's layers: written anew by `plan solve --out`
    path = tmp_path / "dense.yaml"
    path.write_text(yaml.safe_dump(data))
    (pool,) = load_plan(path).pools
    args = list(export_plan(load_plan(path), "sglang").commands[pool.name][0].args)
    assert args[args.index("--tp-size") + 1] == "2" and args[args.index("--dp-size") + 1] == "2"
    assert "--enable-dp-attention" not in args and args[args.index("--max-running-requests") + 1] == "5"
    assert check_args(args, flags_of("sglang")) == []
    assert not any("dense FFN layers over all" in note for note in export_plan(load_plan(path), "sglang").unexpressed)


@pytest.mark.parametrize("engine", ["sglang", "vllm", "dynamo"])
def test_gpt_oss_launches_without_what_its_engine_code_lacks(engine: str) -> None:
    """gpt-oss: SGLang's model raises at its first forward under DeepEP ("forward_deepep branch not implemented
    yet"), vLLM's is no MixtureOfExperts and EPLB asserts one at start-up: neither flag is launched, both said."""
    plan = load_plan(Path(__file__).parent / "plans" / "gpt-oss-120b-8xb200-plan-24.yaml")
    assert plan.resolved.architecture.model_type in NO_DEEPEP & NO_EPLB
    exported = export_plan(plan, engine, "sglang" if engine == "dynamo" else None)
    words = " ".join(" ".join(c.args) for commands in exported.commands.values() for c in commands)
    words += " ".join(line for text in exported.files.values() for line in text.splitlines()
                      if not line.lstrip().startswith("#"))  # the notes name the flags they leave out
    assert "--moe-a2a-backend" not in words and "--enable-eplb" not in words  # (vLLM's DeepEP backend serves it)
    if engine == "sglang":
        assert any(note.startswith("no DeepEP") for note in exported.unexpressed)
    if engine == "vllm":
        assert any(note.startswith("no EPLB") for note in exported.unexpressed)


@pytest.mark.parametrize("batch", [1, 21])
def test_sglang_admits_whole_ranks_of_an_attention_dp_batch(batch: int, tmp_path: Path) -> None:
    """SGLang floors --max-running-requests per attention-DP rank and stops at start-up when a rank gets 0 (a
    prefill pool of one request on dp 8, which the planner accepts): the launch rounds up to whole ranks and
    says so; vLLM's per-rank --max-num-seqs likewise."""
    data = yaml.safe_load((Path(__file__).parent / "plans" / "gpt-oss-120b-8xb200-plan-24.yaml").read_text())
    data["layout"]["pools"][0]["batch"] = batch
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    plan = load_plan(path)
    (pool,) = plan.pools
    per_rank = -(-batch // pool.dp_attention)
    sglang, vllm = export_plan(plan, "sglang"), export_plan(plan, "vllm")
    args = list(sglang.commands[pool.name][0].args)
    assert int(args[args.index("--max-running-requests") + 1]) == per_rank * pool.dp_attention
    args = list(vllm.commands[pool.name][0].args)
    assert int(args[args.index("--max-num-seqs") + 1]) == per_rank
    for exported in (sglang, vllm):
        assert any(f"batch {batch} over {pool.dp_attention}" in note for note in exported.unexpressed)


@pytest.mark.parametrize("engine", ["trtllm", "sglang", "vllm", "dynamo"])
def test_formats_the_checkpoint_does_not_store_are_said(engine: str) -> None:
    """Engines take the quantisation from the checkpoint: a plan priced with fp4 experts on Kimi K2's fp8
    checkpoint says which checkpoint to launch; one priced in the published formats says nothing."""
    fp4 = load_plan(Path(__file__).parent / "plans" / "kimi-k2-gb200-nvl72-plan-18.yaml")
    native = load_plan(Path(__file__).parent / "plans" / "deepseek-v3-8xh200-plan-0.yaml")
    notes = export_plan(fp4, engine).unexpressed
    assert any(n.startswith("the plan prices experts fp4 (published fp8)") for n in notes)
    assert not any("the plan prices" in n for n in export_plan(native, engine).unexpressed)
    assert any("the plan prices experts fp4" in text for text in export_plan(fp4, engine).files.values())

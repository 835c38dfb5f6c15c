"""Real serving measurements (shared/calibration/serving_measurements.csv) as typed cases: for each row a
scenario document, a layout document and the measured TTFT and TPOT.

Mapping rules, CSV -> our schemas:

- `model_path` -> catalog id: exact match, case-insensitive, against `costmodel.models.model_ids()`;
  `meta-llama/Llama-3.1-8B-Instruct` -> `meta-llama/Meta-Llama-3.1-8B` and `meta-llama/Llama-3.1-70B` ->
  `meta-llama/Meta-Llama-3.1-70B` (same architecture, the instruct tune changes no shape). Anything else
  raises ValueError naming the row.
- `system` -> catalog name through `costmodel.hardware.load_system` aliases: h100_sxm -> h100-sxm,
  h200_sxm -> h200-sxm, b200_sxm -> b200-sxm, gb200 -> gb200-nvl72.
- `backend` -> `engine` (trtllm, vllm or sglang), `backend_version` -> `engine_version` (may be empty);
  `mode` agg/disagg -> serving aggregated/disaggregated.
- Precision: `gemm_quant_mode` -> `precision.weights`, `moe_quant_mode` -> `precision.experts`, each with
  fp8 and fp8_block -> fp8, nvfp4 -> fp4, int4_wo -> int4, empty -> bf16.
  ASSUMPTION (every row): the CSV has no KV-cache column; kv_cache is fp8 when `gemm_quant_mode` is fp8,
  fp8_block or nvfp4 (the engines' usual pairing) and bf16 otherwise.
- Layout fields: 0 or empty means 1.
- Aggregated: one pool {role: mixed, replicas: 1, tp, dp_attention: attention_dp_size, pp, moe_tp, moe_ep,
  batch: batch_size x attention_dp_size} (the CSV's batch_size is per attention-DP rank, the layout's batch
  per instance). Empty concurrency: batch_size x attention_dp_size (recorded); a larger concurrency is the
  batch (the engine batched every request in flight: measured TPOT grows with it; recorded).
- Disaggregated: a prefill and a decode pool from the prefill_* / decode_* columns. replicas =
  `*_num_workers`, 1 when missing (recorded). Decode batch = decode_batch_size x decode dp when given, else
  ceil(concurrency / decode replicas) (recorded); prefill batch = prefill_batch_size x prefill dp when given,
  else 1 per attention-DP rank, i.e. the prefill dp (recorded). Empty concurrency: decode replicas x decode
  batch when decode_batch_size is given (recorded), else the row is skipped. A measured concurrency that
  differs from decode replicas x decode batch is kept (recorded).
- Dense models (no routed experts): the CSV fills moe_tp_size / moe_ep_size with 1 (or leaves them empty)
  whatever tp is, which would break tp x dp_attention == moe_tp x moe_ep. There is no expert layer to lay
  out, so the pool gets moe_tp = tp x dp_attention, moe_ep = 1 (what `check_layout` asks of dense models),
  recorded when this changes the CSV's values.
- Attention DP the CSV leaves implicit (recorded): a tp that neither divides the head count nor is a
  multiple of it (DeepSeek-R1 on GB200 at tp 12/20/24/28/36/48/52/72 over 128 heads) is the world size that
  SGLang (`--tp N --dp N --enable-dp-attention`) and TRT-LLM (`enable_attention_dp`) report: read as
  attention DP N of tp 1. On MoE models whose tp x attention_dp and moe_tp x moe_ep disagree, vLLM's
  defaults fill the side left out: expert GPUs beyond tp are data-parallel attention ranks (`--data-parallel-size`
  shares experts tensor-sharded over all ranks), and empty expert degrees mean moe_tp = tp x attention_dp.
- Expert TP that cannot split the experts (recorded): a moe_tp that does not divide the routed experts'
  intermediate size (DeepSeek-R1 on GB200 at moe_tp 12-52 over 2048) shards no engine's experts; those
  rows are TRT-LLM's and SGLang's wide-EP recipes (experts whole, load-balancer slots where they do not
  divide): read as moe_ep N, moe_tp 1.
- An aggregated MoE row written as k x k GPUs with moe_tp = moe_ep = k (tp 16 or 64, or attention DP 64, with
  moe 4 x 4 or 8 x 8 on 8-GPU nodes) is the k-GPU run (tp or attention DP k, moe_tp 1, moe_ep k) that the CSV
  repeats under other ids with the same measured figures (recorded; `_expert_world_squared` gives the
  evidence); a 2 x 2 row, within one node, is kept as written.
- A batch below attention_dp is kept (recorded): the idle ranks join only the expert layers.
- Speculative decoding (recorded): the CSV has no column for it; the TRT-LLM DeepSeek-R1 builds and campaigns
  whose rows' TPOT, against the same layouts elsewhere in the CSV, shows it get DeepSeek's MTP
  (`speculative_runs`: `workload.speculative`).
- Skipped, with the reason (`load_measurements_with_skips`): rows whose degrees contradict each other in a
  way no engine default explains, and rows that `costmodel.resolve` rejects. None in the shared CSV today.
- Scenario: {schema_version: 1, name: row id, model, precision, cluster: {system, gpus}, workload:
  {input_tokens: isl, output_tokens: osl, concurrency, speculative where assumed}, engine}; gpus = the
  layout's GPUs rounded up to whole nodes (`gpus_per_node`), or the exact count below one node. SGLang
  aggregated rows get SGLang's default prefill batch (`prefill_batch_tokens`); TRT-LLM rows
  `attention_dp_balance: true` (assumption: the benchmarks ran NVIDIA's throughput configurations, which
  balance context requests across attention-DP ranks; the flags are not in the CSV, and its 43 aggregated
  attention-DP rows' TTFTs, 3.2x the model's without the hold, say so).

Every scenario and layout is validated with the pydantic models here, and resolved against the catalogs
(`resolve`, `check_layout`); a pydantic failure is a bug in this mapping and raises.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from benchmarks.speculative_runs import speculative_setting
from costmodel.errors import CatalogError, ScenarioError
from costmodel.hardware import load_system
from costmodel.layout import Layout
from costmodel.models import load_model, model_ids
from costmodel.resolve import check_layout, resolve
from costmodel.scenario import Scenario
from costmodel.serving import sglang_chunked_prefill

SHARED_CALIBRATION: Final = Path(__file__).resolve().parents[1].parent / "shared" / "calibration"
# what a row may be held out by; a campaign is one engine build on one system in one serving mode (what one team
# measures on its own cluster, with its own client and settings: `benchmarks.own_calibration`)
GROUP_KEYS: Final = ("model", "system", "engine", "serving", "campaign")

# CSV model_path (lower case) -> catalog id, for checkpoints we hold under another name.
_MODEL_RENAMES: Final = {
    "meta-llama/llama-3.1-8b-instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
}
_QUANT_MODES: Final = {"": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "int4_wo": "int4"}
_FP8_KV_GEMM_MODES: Final = frozenset({"fp8", "fp8_block", "nvfp4"})
_ENGINES: Final = frozenset({"trtllm", "vllm", "sglang"})
_SERVING: Final = {"agg": "aggregated", "disagg": "disaggregated"}
_REQUIRED_COLUMNS: Final = (
    "id", "concurrency", "backend", "backend_version", "model_path", "system", "mode", "isl", "osl",
    "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size",
    "moe_tp_size", "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms",
    *(f"{role}_{field}" for role in ("prefill", "decode") for field in (
        "batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"
    )),
)


@dataclass(frozen=True)
class Measurement:
    """One measured serving run as a scenario and layout of ours, with what it measured."""

    id: str
    model: str
    system: str
    engine: str
    engine_version: str
    serving: str
    isl: int
    osl: int
    concurrency: int
    scenario: dict[str, Any]
    layout: dict[str, Any]
    ttft_ms: float
    tpot_ms: float
    assumptions: tuple[str, ...]

    @property
    def campaign(self) -> str:
        """The row's campaign: engine, its version ("(none)" where the CSV gives none), system, serving mode."""
        return f"{self.engine} {self.engine_version or '(none)'} {self.system} {self.serving}"

    def group(self, key: str) -> str:
        """The value of grouping `key` (one of GROUP_KEYS) for this row."""
        if key not in GROUP_KEYS:
            raise KeyError(f"unknown group key {key!r}; use one of {', '.join(GROUP_KEYS)}")
        value: str = getattr(self, key)
        return value


class _Skip(Exception):
    """The row's data contradicts itself; it is left out with this reason."""


@dataclass(frozen=True)
class _Row:
    fields: Mapping[str, str | None]

    @property
    def id(self) -> str:
        return self.text("id")

    def text(self, column: str) -> str:
        return (self.fields.get(column) or "").strip()

    def integer(self, column: str) -> int | None:
        """Non-negative integer, None when empty."""
        raw = self.text(column)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"row {self.id}: {column} = {raw!r} is not a number") from None
        if value < 0 or not value.is_integer():
            raise ValueError(f"row {self.id}: {column} = {raw!r} is not a non-negative integer")
        return int(value)

    def degree(self, column: str) -> int:
        return self.integer(column) or 1  # 0 or empty means 1

    def positive(self, column: str) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"row {self.id}: {column} = {raw!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"row {self.id}: {column} = {raw!r} must be a positive number")
        return value


def default_measurements_path() -> Path:
    return SHARED_CALIBRATION / "serving_measurements.csv"


def load_measurements(path: Path) -> list[Measurement]:
    """The usable rows of `path`, in file order."""
    return load_measurements_with_skips(path)[0]


def load_measurements_with_skips(path: Path) -> tuple[list[Measurement], list[tuple[str, str]]]:
    """The usable rows of `path` in file order, and (row id, reason) for each row left out."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(missing)}")
        rows = [_Row(fields) for fields in reader]
    seen: set[str] = set()
    measurements: list[Measurement] = []
    skipped: list[tuple[str, str]] = []
    for row in rows:
        if not row.id or row.id in seen:
            raise ValueError(f"{path}: empty or repeated row id {row.id!r}")
        seen.add(row.id)
        try:
            measurements.append(_measurement(row))
        except _Skip as skip:
            skipped.append((row.id, str(skip)))
    return measurements, skipped


def _measurement(row: _Row) -> Measurement:
    notes: list[str] = []
    model, system, engine = _model_id(row), _system(row), _engine(row)
    serving = _SERVING.get(row.text("mode"))
    if serving is None:
        raise ValueError(f"row {row.id}: unknown mode {row.text('mode')!r}; expected agg or disagg")
    arch = load_model(model)
    widths = [layer.ffn.expert_intermediate_size for layer in arch.layers if layer.ffn.kind == "moe"]
    shape = _ModelShape(arch.num_experts is None, min(layer.attention.num_heads for layer in arch.layers),
                        min(widths, default=0))
    if serving == "aggregated":
        layout, concurrency = _aggregated(row, shape, notes)
    else:
        layout, concurrency = _disaggregated(row, shape, notes)
    layout_model = Layout.model_validate(layout)
    isl, osl = row.integer("isl"), row.integer("osl")
    if not isl or not osl:
        raise ValueError(f"row {row.id}: isl and osl must be positive integers")
    scenario: dict[str, Any] = {
        "schema_version": 1,
        "name": row.id,
        "model": model,
        "precision": _precision(row),
        "cluster": {"system": system, "gpus": _cluster_gpus(system, layout_model.gpus)},
        "workload": {"input_tokens": isl, "output_tokens": osl, "concurrency": concurrency},
        "engine": engine,
    }
    speculative = speculative_setting(row_id=row.id, engine=engine, version=row.text("backend_version"), model=model)
    if speculative is not None:
        scenario["workload"]["speculative"] = speculative
        notes.append(f"speculative decoding assumed: {speculative['method']}, {speculative['draft_tokens']} draft "
                     f"token(s) accepted with probability {speculative['acceptance_rate']} (speculative_runs.py)")
    if engine == "trtllm":  # assumption: benchmarked as NVIDIA configures it, balancing attention-DP contexts
        scenario["attention_dp_balance"] = True
    if engine == "sglang" and serving == "aggregated":  # run with SGLang's default chunked prefill
        scenario["prefill_batch_tokens"] = _sglang_default_batch(system, layout["pools"][0]["dp_attention"])
    _check_semantics(Scenario.model_validate(scenario), layout_model)
    return Measurement(
        id=row.id, model=model, system=system, engine=engine, engine_version=row.text("backend_version"),
        serving=serving, isl=isl, osl=osl, concurrency=concurrency, scenario=scenario, layout=layout,
        ttft_ms=row.positive("silicon_ttft_ms"), tpot_ms=row.positive("silicon_tpot_ms"),
        assumptions=tuple(notes),
    )


def _sglang_default_batch(system: str, dp: int) -> int:
    """SGLang's default chunked_prefill_size for the GPU, divided among attention-DP ranks as SGLang divides it
    (`chunked_prefill_size // dp_size`): the rows give no flags, so the defaults are assumed."""
    return sglang_chunked_prefill(load_system(system).hbm_capacity_bytes) // dp


def _check_semantics(scenario: Scenario, layout: Layout) -> None:
    """Rows whose layout the model cannot be split by (e.g. tp not dividing the heads) are skipped."""
    try:
        check_layout(resolve(scenario), layout)
    except ScenarioError as exc:
        parts = exc.field.split(".")
        where = exc.field
        if parts[0] == "pools" and len(parts) > 1 and parts[1].isdigit():
            where = f"{layout.pools[int(parts[1])].role} pool"
        raise _Skip(f"{where}: {exc}") from None


def _model_id(row: _Row) -> str:
    raw = row.text("model_path")
    by_lower = {model_id.lower(): model_id for model_id in model_ids()}
    key = _MODEL_RENAMES.get(raw.lower(), raw).lower()
    if key not in by_lower:
        raise ValueError(f"row {row.id}: model_path {raw!r} matches no catalog model (`plan catalog models`)")
    return by_lower[key]


def _system(row: _Row) -> str:
    try:
        return load_system(row.text("system")).name
    except CatalogError as exc:
        raise ValueError(f"row {row.id}: {exc}") from None


def _engine(row: _Row) -> str:
    engine = row.text("backend")
    if engine not in _ENGINES:
        raise ValueError(f"row {row.id}: unknown backend {engine!r}; expected one of {sorted(_ENGINES)}")
    return engine


def _precision(row: _Row) -> dict[str, str]:
    modes = {field: row.text(column) for field, column in (("weights", "gemm_quant_mode"),
                                                            ("experts", "moe_quant_mode"))}
    unknown = sorted(mode for mode in modes.values() if mode not in _QUANT_MODES)
    if unknown:
        raise ValueError(f"row {row.id}: unknown quant mode(s) {unknown}; known: {sorted(_QUANT_MODES)}")
    kv_cache = "fp8" if modes["weights"] in _FP8_KV_GEMM_MODES else "bf16"
    return {"weights": _QUANT_MODES[modes["weights"]], "experts": _QUANT_MODES[modes["experts"]],
            "kv_cache": kv_cache}


def _cluster_gpus(system: str, layout_gpus: int) -> int:
    per_node = load_system(system).gpus_per_node
    if layout_gpus < per_node:
        return layout_gpus
    return -(-layout_gpus // per_node) * per_node


def _aggregated(row: _Row, shape: _ModelShape, notes: list[str]) -> tuple[dict[str, Any], int]:
    per_rank = row.integer("batch_size")
    if not per_rank:
        raise _Skip("aggregated row without batch_size")
    batch = per_rank * row.degree("attention_dp_size")
    concurrency = row.integer("concurrency")
    if not concurrency:
        notes.append(f"concurrency missing: assumed batch_size x attention_dp_size = {batch}")
        concurrency = batch
    elif concurrency > batch:
        # The measured TPOT grows with concurrency at a fixed batch_size (GB200 Qwen3-32B: 8.1 ms at c1, 41.9 ms
        # at c2, batch_size 1): the engine batched every request in flight, so the batch is the concurrency.
        notes.append(f"concurrency {concurrency} > batch_size x attention_dp_size = {batch}: batch = concurrency")
        batch = concurrency
    elif concurrency != batch:
        notes.append(
            f"concurrency {concurrency} != batch_size x attention_dp_size = {batch}: kept the measured concurrency"
        )
    pools = [_pool(row, "", "mixed", 1, batch, shape, notes, node_gpus=load_system(row.text("system")).gpus_per_node)]
    return {"schema_version": 1, "serving": "aggregated", "pools": pools}, concurrency


def _disaggregated(row: _Row, shape: _ModelShape, notes: list[str]) -> tuple[dict[str, Any], int]:
    prefill_replicas, decode_replicas = _replicas(row, "prefill", notes), _replicas(row, "decode", notes)
    concurrency = row.integer("concurrency")
    per_rank = row.integer("decode_batch_size")
    if per_rank:
        decode_batch = per_rank * row.degree("decode_attention_dp_size")
        instances_hold = decode_replicas * decode_batch
        if not concurrency:
            notes.append(f"concurrency missing: assumed decode replicas x decode batch = {instances_hold}")
            concurrency = instances_hold
        elif concurrency != instances_hold:
            notes.append(
                f"concurrency {concurrency} != decode replicas x decode batch = {instances_hold}: "
                "kept the measured concurrency"
            )
    elif not concurrency:
        raise _Skip("disaggregated row without concurrency or decode_batch_size")
    else:
        decode_batch = -(-concurrency // decode_replicas)
        notes.append(f"decode_batch_size missing: assumed ceil(concurrency / decode replicas) = {decode_batch}")
    prefill_dp = row.degree("prefill_attention_dp_size")
    prefill_per_rank = row.integer("prefill_batch_size")
    if not prefill_per_rank:
        notes.append(f"prefill_batch_size missing: assumed 1 per attention-DP rank, batch {prefill_dp}")
        prefill_per_rank = 1
    pools = [
        _pool(row, "prefill_", "prefill", prefill_replicas, prefill_per_rank * prefill_dp, shape, notes),
        _pool(row, "decode_", "decode", decode_replicas, decode_batch, shape, notes),
    ]
    return {"schema_version": 1, "serving": "disaggregated", "pools": pools}, concurrency


def _replicas(row: _Row, role: str, notes: list[str]) -> int:
    workers = row.integer(f"{role}_num_workers")
    if not workers:
        notes.append(f"{role}_num_workers missing: assumed 1")
        return 1
    return workers


@dataclass(frozen=True)
class _ModelShape:
    dense: bool  # no routed experts
    heads: int  # attention heads (the fewest of any layer)
    expert_width: int = 0  # routed experts' intermediate size (the narrowest of any MoE layer; 0: dense)


def _pool(row: _Row, prefix: str, role: str, replicas: int, batch: int, shape: _ModelShape,
          notes: list[str], node_gpus: int | None = None) -> dict[str, Any]:
    tp, dp, pp = (row.degree(prefix + c) for c in ("tp_size", "attention_dp_size", "pp_size"))
    moe_tp, moe_ep = row.degree(prefix + "moe_tp_size"), row.degree(prefix + "moe_ep_size")
    if node_gpus is not None:
        tp, dp, moe_tp = _expert_world_squared(role, tp, dp, moe_tp, moe_ep, node_gpus, notes)
    if dp == 1 and shape.heads % tp and tp % shape.heads:
        # SGLang (--tp N --dp N --enable-dp-attention) and TRT-LLM (enable_attention_dp) report the world size
        # as tp; no engine splits heads unevenly, so such a tp is attention-DP ranks of tp 1 each.
        notes.append(f"{role} pool: tp {tp} does not split the {shape.heads} heads: read as attention DP {tp}, tp 1")
        tp, dp = 1, tp
    if shape.dense and (moe_tp, moe_ep) != (tp * dp, 1):
        notes.append(
            f"{role} pool: dense model, moe_tp x moe_ep = {moe_tp} x {moe_ep} replaced by "
            f"tp x attention_dp = {tp * dp} x 1"
        )
        moe_tp, moe_ep = tp * dp, 1
    tp, dp, moe_tp = _matched_groups(role, tp, dp, moe_tp, moe_ep, notes)
    if not shape.dense and moe_ep == 1 and moe_tp > 1 and shape.expert_width % moe_tp:
        # no engine shards an expert's intermediate unevenly; TRT-LLM's wide-EP recipes on GB200 (attention DP
        # over 12-72 GPUs) place whole experts, with load-balancer slots where the experts do not divide
        notes.append(f"{role} pool: moe_tp {moe_tp} does not split the experts' {shape.expert_width}-wide "
                     f"intermediate: read as moe_ep {moe_tp}, moe_tp 1")
        moe_tp, moe_ep = 1, moe_tp
    if batch < dp:
        notes.append(f"{role} pool: batch {batch} < attention_dp {dp}: {dp - batch} ranks hold no sequence")
    return {"role": role, "replicas": replicas, "tp": tp, "dp_attention": dp, "pp": pp,
            "moe_tp": moe_tp, "moe_ep": moe_ep, "batch": batch}


def _expert_world_squared(role: str, tp: int, dp: int, moe_tp: int, moe_ep: int, node_gpus: int,
                          notes: list[str]) -> tuple[int, int, int]:
    """(tp, dp, moe_tp) of an aggregated row written as a world of k x k GPUs with moe_tp = moe_ep = k.

    Such a row is a run on k GPUs (tp k or attention DP k, expert parallel k, moe_tp 1) whose expert degrees
    were written (k, k) instead of (1, k), the attention side then multiplied by k to match: in the CSV,
    every aggregated row with moe_tp and moe_ep both above 1 has this form (SGLang and TRT-LLM, DeepSeek-R1/V3
    and gpt-oss-120b, except one Qwen3-235B row named tp4), the 12 of them repeated under another id in the
    k-GPU form carry the same measured TTFT and TPOT to the last digit (2026_04_06_deepseek_r1_b200_sxm_
    sglang_fp4_agg_1024x1024_c16_tp8_ep8_1036 at tp 64 / moe 8 x 8 and 2026_03_25_..._c16_tp8_0_ep8_0_257 at
    tp 8 / ep 8; TRT-LLM attention DP 64 at batch 4 and attention DP 8 at batch 32, concurrency 256), and the
    ids that name a layout name the k-GPU one (`_tp8_ep8_`, `_tp4_ep4_`). Neither engine's flags give k x k:
    SGLang's `--ep-size` splits the `--tp-size` ranks (moe_tp = tp / ep, the world is tp; SGLang server
    arguments), TRT-LLM's `moe_tensor_parallel_size` x `moe_expert_parallel_size` = `tensor_parallel_size`
    (TensorRT-LLM LLM API), and a 16- or 64-GPU attention-TP group across 8-GPU HGX nodes is in no engine's
    recipes. Read only where k x k spans more than one node (b200/h200 at 16 and 64 GPUs). A 2 x 2 row
    (4 GPUs, one node) is ambiguous and kept as written: gpt-oss-120b's are named `_tp2_ep2_`, but the
    Qwen3-235B one is named tp4 and its 235 GB of fp8 weights need more than two H100s.
    """
    k = moe_ep
    if not (moe_tp == k > 1 and tp * dp == k * k and k * k > node_gpus and min(tp, dp) == 1):
        return tp, dp, moe_tp
    new_tp, new_dp = (tp // k, dp) if dp == 1 else (tp, dp // k)
    notes.append(f"{role} pool: tp x attention_dp = {tp} x {dp} with moe_tp = moe_ep = {k} over {tp * dp} GPUs: "
                 f"read as a {k}-GPU run, tp {new_tp} x attention_dp {new_dp}, moe_tp 1 x moe_ep {k}")
    return new_tp, new_dp, 1


def _matched_groups(role: str, tp: int, dp: int, moe_tp: int, moe_ep: int, notes: list[str]) -> tuple[int, int, int]:
    """(tp, dp, moe_tp) with tp x dp == moe_tp x moe_ep, from vLLM's defaults where the CSV leaves a side out:
    data-parallel ranks share experts tensor-sharded over all of them unless expert parallelism is on."""
    attention, experts = tp * dp, moe_tp * moe_ep
    if attention == experts:
        return tp, dp, moe_tp
    if dp == 1 and experts > attention and experts % tp == 0:
        notes.append(f"{role} pool: moe_tp x moe_ep = {experts} GPUs but tp {tp}: read as attention DP {experts // tp}")
        return tp, experts // tp, moe_tp
    if moe_ep == 1 and moe_tp == 1:
        notes.append(f"{role} pool: expert degrees empty beside tp x attention_dp = {attention}: read as moe_tp "
                     f"{attention}")
        return tp, dp, attention
    raise _Skip(f"{role} pool: tp x attention_dp = {tp} x {dp} != moe_tp x moe_ep = {moe_tp} x {moe_ep}")

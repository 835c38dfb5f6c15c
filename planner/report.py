"""Summaries of catalog entries for people (rich tables) and scripts (plain dicts for JSON)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from costmodel.architecture import Architecture, Layer, LayerGroup
from costmodel.errors import ConfigError
from costmodel.hardware import SystemSpec, load_system, system_names
from costmodel.hf_config import parse_hf_config
from costmodel.models import aliases, load_model, model_ids
from costmodel.precision import Dtype
from costmodel.safe_load import InputLimitError, key_line, load_json, read_text
from planner.errors import InputError

# Context length at which per-sequence state of windowed layers is quoted (their cap is reached by then).
_STATE_CONTEXT_TOKENS = 131072


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader closed standard output: click's to handle, and the CLI's to exit with
        (`planner.cli.SIGPIPE_EXIT`); rich would point standard output at /dev/null first, hiding the closed pipe."""
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def echo_text(text: str) -> None:
    """`text` and a newline to standard output, every byte or a BrokenPipeError (`planner.cli.SIGPIPE_EXIT`):
    CPython's buffered writer takes a partial write into a pipe whose reader has gone as written, and the
    process then exited 0 with most of a large JSON document lost (`plan solve --format json | head -1`)."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured or replaced (tests, in-process callers)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    data = (text + "\n").encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


def console(width: int = 200) -> Console:
    # Piped output (scripts, CI logs) gets a wide fixed width so tables are never truncated.
    console = _Console(highlight=False)
    return console if console.is_terminal else _Console(highlight=False, width=width)


def find_model(name: str) -> Architecture:
    return load_model(name, Path.cwd())


def catalog_rows(kind: str) -> list[dict[str, Any]]:
    if kind == "models":
        alias_of = {target: alias for alias, target in sorted(aliases().items(), reverse=True)}
        return [_model_row(model_id, alias_of.get(model_id)) for model_id in model_ids()]
    return [_system_row(load_system(name)) for name in system_names()]


def _model_row(model_id: str, alias: str | None) -> dict[str, Any]:
    arch = load_model(model_id)
    return {
        "id": model_id,
        "alias": alias,
        "total_params": arch.total_params(),
        "active_params": arch.active_params(),
        "layers": arch.num_layers,
        "experts": arch.num_experts,
        "top_k": arch.top_k,
        "kv_bytes_per_token_bf16": arch.kv_bytes_per_token(Dtype.BF16),
    }


def _system_row(spec: SystemSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "gpu": spec.gpu_name,
        "hbm_bytes": spec.hbm_capacity_bytes,
        "hbm_bytes_per_s": spec.hbm_bandwidth_bytes_per_s,
        "scaleup_domain_gpus": spec.scaleup_domain_gpus,
        "formats": sorted(str(d) for d in spec.peak_flops_per_s),
    }


def print_catalog(kind: str) -> None:
    rows = catalog_rows(kind)
    table = Table(title=f"{kind} ({len(rows)})")
    if kind == "models":
        for column in ("id", "alias", "total", "active", "layers", "experts", "KV B/token (bf16)"):
            table.add_column(column, justify="left" if column in ("id", "alias") else "right")
        for r in rows:
            experts = f"{r['experts']} top-{r['top_k']}" if r["experts"] else "dense"
            table.add_row(r["id"], r["alias"] or "", _params(r["total_params"]), _params(r["active_params"]),
                          str(r["layers"]), experts, f"{r['kv_bytes_per_token_bf16']:,.0f}")
    else:
        for column in ("name", "gpu", "HBM", "HBM bandwidth", "scale-up domain", "formats"):
            table.add_column(column)
        for r in rows:
            table.add_row(r["name"], r["gpu"], f"{r['hbm_bytes'] / 1e9:.0f} GB",
                          f"{r['hbm_bytes_per_s'] / 1e12:.2f} TB/s", f"{r['scaleup_domain_gpus']} GPUs",
                          ", ".join(r["formats"]))
    console().print(table)


def _params(count: float) -> str:
    return f"{count / 1e12:.2f}T" if count >= 1e12 else f"{count / 1e9:.1f}B"


def describe_layer(layer: Layer) -> str:
    attention = layer.attention
    if attention.kind == "linear":
        attn = f"{attention.linear_kind} linear"
    elif attention.kind == "mla":
        attn = "MLA" + (f" + indexer top-{attention.index_topk}" if attention.index_topk else "")
    else:
        attn = "MHA" if attention.num_kv_heads == attention.num_heads else f"GQA {attention.num_kv_heads} kv"
    if attention.window:
        attn += f" sliding {attention.window}"
    if attention.chunk:
        attn += f" chunked {attention.chunk}"
    ffn = layer.ffn
    if ffn.kind == "dense":
        return f"{attn} + dense FFN {ffn.intermediate_size}"
    shared = f" + {ffn.num_shared_experts} shared" if ffn.num_shared_experts else ""
    return f"{attn} + MoE {ffn.num_experts}e top-{ffn.top_k}{shared}"


def _group_row(group: LayerGroup) -> dict[str, Any]:
    last = group.first_layer + group.repeats * len(group.layers) - 1
    return {
        "layers": f"{group.first_layer}-{last}",
        "repeats": group.repeats,
        "unit": [describe_layer(layer) for layer in group.layers],
    }


def model_summary(arch: Architecture) -> dict[str, Any]:
    return {
        "id": arch.name,
        "total_params": arch.total_params(),
        "active_params": arch.active_params(),
        "layers": arch.num_layers,
        "moe_layers": arch.moe_layers,
        "experts": arch.num_experts,
        "top_k": arch.top_k,
        "mtp_layers": arch.mtp_layers,
        "hidden_size": arch.hidden_size,
        "vocab_size": arch.vocab_size,
        "max_context_tokens": arch.max_position_embeddings,
        "native_precision": {"weights": str(arch.native_weights), "experts": str(arch.native_experts)},
        "kv_bytes_per_token": {str(d): arch.kv_bytes_per_token(d) for d in (Dtype.BF16, Dtype.FP8)},
        "state_bytes_per_sequence_bf16": arch.state_bytes_per_sequence(_STATE_CONTEXT_TOKENS, Dtype.BF16),
        "state_context_tokens": _STATE_CONTEXT_TOKENS,
        "layer_groups": [_group_row(group) for group in arch.groups],
        "notes": list(arch.notes),
    }


def print_model(summary: dict[str, Any]) -> None:
    out = console()
    out.print(f"[bold]{summary['id']}[/bold]")
    experts = f"{summary['experts']} routed, top-{summary['top_k']}" if summary["experts"] else "none (dense)"
    kv = summary["kv_bytes_per_token"]
    lines = [
        ("parameters", f"{_params(summary['total_params'])} ({summary['total_params']:,})"),
        ("active parameters", f"{_params(summary['active_params'])} ({summary['active_params']:,})"),
        ("layers", f"{summary['layers']} ({summary['moe_layers']} MoE) + {summary['mtp_layers']} MTP"),
        ("experts", experts),
        ("hidden / vocab", f"{summary['hidden_size']:,} / {summary['vocab_size']:,}"),
        ("max context", f"{summary['max_context_tokens']:,} tokens"),
        ("native precision", f"weights {summary['native_precision']['weights']}, "
                             f"experts {summary['native_precision']['experts']}"),
        ("KV bytes per token", f"{kv['bf16']:,.0f} at bf16, {kv['fp8']:,.0f} at fp8"),
        ("state per sequence", f"{summary['state_bytes_per_sequence_bf16'] / 2**20:,.1f} MiB "
                               f"(bf16 KV, at {summary['state_context_tokens']:,} tokens)"),
    ]
    for label, value in lines:
        out.print(f"  {label:<20} {value}")
    table = Table(title="layer groups")
    for column in ("layers", "repeats", "repeating unit"):
        table.add_column(column)
    for group in summary["layer_groups"]:
        table.add_row(group["layers"], str(group["repeats"]), " | ".join(group["unit"]))
    out.print(table)
    for note in summary["notes"]:
        out.print(f"  note: {note}")


def system_summary(name: str) -> dict[str, Any]:
    return load_system(name).model_dump(mode="json")


def print_system(summary: dict[str, Any]) -> None:
    out = console()
    out.print(f"[bold]{summary['name']}[/bold]: {summary['description']}")
    table = Table()
    for column in ("field", "value", "source"):
        table.add_column(column)
    sources: dict[str, str] = summary["sources"]
    for field, value in summary.items():
        if field in ("name", "description", "sources"):
            continue
        shown = ", ".join(f"{k}: {v:.4g}" for k, v in value.items()) if isinstance(value, dict) else (
            f"{value:.4g}" if isinstance(value, float) else str(value))
        table.add_row(field, shown, sources.get(field, ""))
    out.print(table)


def import_hf_config(path: Path, name: str | None) -> dict[str, Any]:
    """Parse a Hugging Face config.json into the normalised model dict that `plan import-hf` writes."""
    try:  # within the input limits: a regular UTF-8 file, no NaN, bounded nesting
        text = read_text(path)
        config = load_json(text)
    except InputLimitError as exc:
        raise InputError.single(path, exc.line, "", str(exc)) from None
    if not isinstance(config, dict):
        raise InputError.single(path, 1, "", "a config.json must be a JSON object")
    try:
        arch = parse_hf_config(config, name or path.name.removesuffix(".json").removesuffix(".config"))
    except ConfigError as exc:
        raise InputError.single(path, key_line(text, exc.field), exc.field or "", str(exc)) from None
    return arch.to_yaml_dict()

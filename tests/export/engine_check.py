"""Check generated engine flags and config keys against the engines' own definitions.

The definitions are `engine_args/<engine>.json`, extracted from the pinned releases by
`tools/engine_args.py`. A check returns the problems found (empty: every flag and value is defined).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

HERE = Path(__file__).parent
PLACEHOLDER = re.compile(r"^\$\{[A-Z_][A-Z0-9_]*\}(:\d+)?$")  # a shell variable set per node


@cache
def definitions(engine: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "engine_args" / f"{engine}.json").read_text(encoding="utf-8"))
    return data


def flags_of(*groups: str) -> dict[str, Any]:
    """Flags of `sglang`, `vllm` or `dynamo:<module>` merged (a Dynamo worker takes its engine's flags too)."""
    out: dict[str, Any] = {}
    for group in groups:
        engine, _, module = group.partition(":")
        flags = definitions(engine)["flags"]
        out.update(flags[module] if module else flags)
    return out


def check_args(args: list[str] | tuple[str, ...], flags: dict[str, Any], positionals: int = 0) -> list[str]:
    """Every `--flag` defined; a value after each flag that takes one, of the defined type or choice."""
    problems: list[str] = []
    words, seen_positionals = list(args), 0
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-"):
            seen_positionals += 1
            if seen_positionals > positionals:
                problems.append(f"unexpected positional argument {word!r}")
            continue
        flag, _, inline = word.partition("=")
        spec = flags.get(flag)
        if spec is None:
            problems.append(f"{flag}: not defined")
            continue
        if spec["type"] == "flag":
            if inline:
                problems.append(f"{flag}: takes no value")
            continue
        if inline:
            value = inline
        elif index < len(words) and not (words[index].startswith("--")):
            value = words[index]
            index += 1
        else:
            problems.append(f"{flag}: needs a value")
            continue
        problems += [f"{flag} {value!r}: {p}" for p in check_value(value, spec)]
    return problems


def check_value(value: str, spec: dict[str, Any]) -> list[str]:
    kind = spec["type"]
    if PLACEHOLDER.match(value) or (kind == "str" and "${" in value):
        return []
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
    except ValueError:
        return [f"not a {kind}"]
    if kind == "choice" and value not in [str(c) for c in spec["choices"]]:
        return [f"not one of {spec['choices']}"]
    if kind == "json":
        return check_json(value, spec.get("keys"))
    return []


def check_json(value: str, keys: dict[str, Any] | None) -> list[str]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc.msg}"]
    if not isinstance(data, dict):
        return ["not a JSON object"]
    if keys is None:
        return []
    problems = [f"key {k!r} not defined" for k in data if k not in keys]
    for key, item in data.items():
        spec = keys.get(key, {})
        if spec.get("type") == "choice" and item not in spec["choices"]:
            problems.append(f"key {key!r}: {item!r} not one of {spec['choices']}")
    return problems


def dotted_keys(data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    out = []
    for key, value in data.items():
        out.append(prefix + str(key))
        out += dotted_keys(value, prefix + str(key) + ".")
    return out


def check_trtllm_options(options: dict[str, Any]) -> list[str]:
    known = set(definitions("trtllm")["keys"])
    return [f"{key}: not a known LLM-API option" for key in dotted_keys(options) if key not in known]


DYNAMO_WORKER_FLAGS = {
    "trtllm": ("dynamo:trtllm", "dynamo:common"),
    "sglang": ("sglang", "dynamo:sglang", "dynamo:common"),
    "vllm": ("vllm", "dynamo:vllm", "dynamo:common"),
}


def check_every_engine(plan: Any) -> tuple[int, list[str]]:
    """Export `plan` (a `planner.export.Plan`) for every engine, Dynamo with each backend; the flags and
    TensorRT-LLM keys checked, and the problems found."""
    from planner.export import export_plan

    checked, problems = 0, []
    for engine, groups, positionals in (("sglang", ("sglang",), 0), ("vllm", ("vllm",), 1)):
        for commands in export_plan(plan, engine).commands.values():
            for command in commands:
                problems += check_args(command.args, flags_of(*groups), positionals)
                checked += sum(1 for word in command.args if word.startswith("--"))
    # A composite plan exports each deployment into its folder (`deployment<i>/<file>`): names are checked by
    # their last part.
    trtllm_configs = export_plan(plan, "trtllm").configs
    options = [data for name, data in trtllm_configs.items() if not PurePosixPath(name).name.startswith("trtllm-eplb-")]
    if not options:
        problems.append(f"trtllm: no LLM-API options file among {sorted(trtllm_configs)}")
    for data in options:
        problems += check_trtllm_options(data)
        checked += len(dotted_keys(data))
    for backend, worker_groups in DYNAMO_WORKER_FLAGS.items():
        configs = export_plan(plan, "dynamo", backend).configs
        manifests = [config for name, config in configs.items() if PurePosixPath(name).name == "dynamo-deployment.yaml"]
        if not manifests:
            problems.append(f"dynamo ({backend}): no dynamo-deployment.yaml among {sorted(configs)}")
        for manifest in manifests:
            for service in manifest["documents"][-1]["spec"]["services"].values():
                args = service["extraPodSpec"]["mainContainer"]["args"]
                frontend = service["componentType"] == "frontend"
                flag_groups = ("dynamo:frontend", "dynamo:common") if frontend else worker_groups
                problems += check_args(args, flags_of(*flag_groups))
                checked += sum(1 for word in args if word.startswith("--"))
    return checked, problems

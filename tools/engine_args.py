"""Extract the serving engines' own argument definitions from their released wheels into small JSON files.

`plan export` writes flags and config keys for pinned engine versions (`planner.export.base.ENGINE_VERSIONS`);
tests check each against what the engine defines at that version. The wheels are large (vLLM about
340 MB), so this script downloads them once (`pip download --no-deps`), reads the argument definitions
from their source with `ast` (nothing is imported or installed) and writes
`tests/export/engine_args/<engine>.json`, which the tests read.

    python tools/engine_args.py [--wheels DIR] [--out tests/export/engine_args]

What is read:
- SGLang: every `A[type, "help" | Arg(...)]` field of `sglang/srt/arg_groups/fields/*.py` (the CLI is
  generated from them: `--field-name`, `cli_name`, `aliases`, `no_cli`, bool -> store_true, Literal ->
  choices) plus the `parser.add_argument` calls of `server_args.py`.
- vLLM: the `add_argument` calls of `vllm/engine/arg_utils.py` and `vllm/entrypoints/launchers/cli_args.py`,
  each flag's type from its config dataclass field (`**parallel_kwargs["x"]` -> `ParallelConfig.x`):
  bool -> `--x/--no-x`, Literal -> choices, a config class -> JSON with that class's keys.
- Dynamo: `add_argument(flag_name=...)` / `add_negatable_bool_argument` / `add_argument("--x")` calls of
  the worker and frontend argument modules.
- TensorRT-LLM: PyPI ships only a stub whose build downloads the wheel from NVIDIA's own index, which is
  not reachable here; its keys are read from the Dynamo-pinned TensorRT-LLM worker arguments of Dynamo
  and from the `extra_engine_args` template aiconfigurator (NVIDIA) ships for the nearest version,
  marked as such in the JSON (`source`).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from planner.export.base import ENGINE_VERSIONS  # noqa: E402

AICONFIGURATOR = ("aiconfigurator", "0.12.0")
AIC_TEMPLATE = "aiconfigurator/generator/config/backend_templates/trtllm/extra_engine_args.1.3.0rc23.yaml.j2"
SCALARS = {"int": "int", "float": "float", "str": "str"}


def download(package: str, version: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_")
    found = sorted(folder.glob(f"{stem}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"{package}=={version}", "-d",
                        str(folder)], check=True)
        found = sorted(folder.glob(f"{stem}-{version}-*.whl"))
    return found[0]


def sources(wheel: zipfile.ZipFile, pattern: str) -> dict[str, ast.Module]:
    return {name: ast.parse(wheel.read(name).decode("utf-8")) for name in sorted(wheel.namelist())
            if re.fullmatch(pattern, name)}


def constants(modules: dict[str, ast.Module]) -> dict[str, Any]:
    """Module-level `NAME = <literal>` (lists of choices, Literal aliases as their source) of all modules."""
    out: dict[str, Any] = {}
    for tree in modules.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    out[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    out[node.targets[0].id] = node.value  # e.g. Literal[...]: kept as a node
    return out


def type_info(node: ast.expr | None, names: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """What a CLI value of this annotation must be: bool, one of choices, a scalar, a list or JSON."""
    if node is None or depth > 12:  # a recursion guard: vLLM nests Literal aliases four deep (SpeculativeMethod)
        return {"type": "any"}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return type_info(ast.parse(node.value, mode="eval").body, names, depth + 1)
        except SyntaxError:
            return {"type": "any"}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        parts = [p for p in (node.left, node.right) if not (isinstance(p, ast.Constant) and p.value is None)]
        return type_info(parts[0], names, depth + 1) if len(parts) == 1 else {"type": "any"}
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        inner = node.slice
        if head == "Optional":
            return type_info(inner, names, depth + 1)
        if head == "Literal":
            values = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            choices: list[Any] = []
            for value in values:
                if isinstance(value, ast.Constant):
                    choices.append(value.value)
                else:  # Literal[OtherAlias, ...]
                    choices += type_info(value, names, depth + 1).get("choices", [])
            return {"type": "choice", "choices": choices}
        if head in ("list", "List", "tuple", "Tuple"):
            return {"type": "list"}
        if head in ("dict", "Dict"):
            return {"type": "json"}
        if head == "Annotated" and isinstance(inner, ast.Tuple):
            return type_info(inner.elts[0], names, depth + 1)
        return {"type": "any"}
    if isinstance(node, ast.Name | ast.Attribute):
        name = ast.unparse(node).split(".")[-1]
        if name == "bool":
            return {"type": "bool"}
        if name in SCALARS:
            return {"type": SCALARS[name]}
        alias = names.get(name)
        if isinstance(alias, ast.expr):
            return type_info(alias, names, depth + 1)
        return {"type": "any", "name": name}
    return {"type": "any"}


# ---------------------------------------------------------------- SGLang


def sglang_flags(wheel: zipfile.ZipFile) -> dict[str, Any]:
    fields = sources(wheel, r"sglang/srt/arg_groups/fields/[a-z_]+\.py")
    names = constants({**fields, **sources(wheel, r"sglang/srt/arg_groups/choices\.py")})
    flags: dict[str, Any] = {}
    for tree in fields.values():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                entry = _sglang_field(item, names)
                if entry is not None:
                    for flag in entry.pop("flags"):
                        flags[flag] = entry
    server = sources(wheel, r"sglang/srt/server_args\.py")
    for tree in server.values():
        for call in _add_argument_calls(tree):
            _explicit(call, flags, names)
    return flags


def _sglang_field(item: ast.stmt, names: dict[str, Any]) -> dict[str, Any] | None:
    if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
        return None
    ann = item.annotation
    if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "A" and isinstance(ann.slice, ast.Tuple)):
        return None
    kind, meta = ann.slice.elts[0], ann.slice.elts[1]
    keywords = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
    if "no_cli" in keywords and ast.literal_eval(keywords["no_cli"]) is True:
        return None
    name = item.target.id
    cli = ast.literal_eval(keywords["cli_name"]) if "cli_name" in keywords else "--" + name.replace("_", "-")
    aliases = ast.literal_eval(keywords["aliases"]) if "aliases" in keywords else []
    info = type_info(kind, names)
    if "choices" in keywords:
        choices = _value(keywords["choices"], names)
        if isinstance(choices, list):
            info = {"type": "choice", "choices": choices}
    if info["type"] == "bool" and "action" not in keywords:
        info = {"type": "flag"}  # store_true: no value
    elif "action" in keywords:
        info = {"type": "any", "action": ast.unparse(keywords["action"])}
    return {"flags": [cli, *aliases], "dest": name, **info}


# ---------------------------------------------------------------- vLLM


def vllm_flags(wheel: zipfile.ZipFile) -> dict[str, Any]:
    configs = sources(wheel, r"vllm/config/[a-z_]+\.py")
    names = constants(configs)
    classes = {c.name: c for tree in configs.values() for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    flags: dict[str, Any] = {}
    for path in ("vllm/engine/arg_utils.py", "vllm/entrypoints/launchers/cli_args.py"):
        tree = ast.parse(wheel.read(path).decode("utf-8"))
        kwargs_of = {t.id: ast.unparse(v.args[0]) for v, t in _get_kwargs_assignments(tree)}
        for call in _add_argument_calls(tree):
            spread = [k.value for k in call.keywords if k.arg is None]
            entry = _explicit(call, flags, names)
            if entry is None or not spread or not isinstance(spread[0], ast.Subscript):
                continue
            holder, field = ast.unparse(spread[0].value), _value(spread[0].slice, names)
            info = _vllm_field(classes.get(kwargs_of.get(holder, "")), field, names, classes)
            for flag in entry["flags"]:
                flags[flag].update(info)
                if info.get("type") == "bool":
                    flags["--no-" + flag[2:]] = {"dest": field, "type": "flag"}
        _frontend_fields(tree, flags, names)
    for entry in flags.values():
        if entry.get("type") == "bool":
            entry["type"] = "flag"  # BooleanOptionalAction: --x / --no-x, no value
        entry.pop("flags", None)
    return flags


def _get_kwargs_assignments(tree: ast.Module) -> list[tuple[ast.Call, ast.Name]]:
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func).endswith("get_kwargs") and node.value.args
                and isinstance(node.targets[0], ast.Name)):
            out.append((node.value, node.targets[0]))
    return out


def _vllm_field(cls: ast.ClassDef | None, field: Any, names: dict[str, Any],
                classes: dict[str, ast.ClassDef]) -> dict[str, Any]:
    if cls is None:
        return {}
    for item in cls.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id == field:
            info = type_info(item.annotation, names)
            if info.get("name") in classes:  # a nested config passed as JSON
                return {"type": "json", "keys": _class_fields(classes[info["name"]], names)}
            info.pop("name", None)
            return info
    return {}


def _class_fields(cls: ast.ClassDef, names: dict[str, Any]) -> dict[str, Any]:
    return {item.target.id: type_info(item.annotation, names) for item in cls.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


def _frontend_fields(tree: ast.Module, flags: dict[str, Any], names: dict[str, Any]) -> None:
    """`FrontendArgs` dataclasses: every field is `--field-name` (get_kwargs on the class)."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("FrontendArgs")):
        for name, info in _class_fields(cls, names).items():
            info = {"type": "flag"} if info["type"] == "bool" else info
            flags.setdefault("--" + name.replace("_", "-"), {"dest": name, **info})
            if info["type"] == "flag":
                flags.setdefault("--no-" + name.replace("_", "-"), {"dest": name, "type": "flag"})


# ---------------------------------------------------------------- shared argparse reading


def _add_argument_calls(tree: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "add_argument"]


def _value(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name) and node.id in names and not isinstance(names[node.id], ast.expr):
        return names[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _explicit(call: ast.Call, flags: dict[str, Any], names: dict[str, Any]) -> dict[str, Any] | None:
    """A `parser.add_argument("--x", "-y", action=..., choices=..., type=...)` call."""
    given = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    given = [g for g in given if g.startswith("-")]
    if not given:
        return None
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    entry: dict[str, Any] = {"flags": given, "type": "any"}
    action = ast.unparse(keywords["action"]) if "action" in keywords else None
    if action in ("'store_true'", "'store_false'") or (action and "StoreTrue" in action):
        entry["type"] = "flag"
    elif action and "BooleanOptionalAction" in action:
        entry["type"] = "bool"
    elif "choices" in keywords and isinstance(_value(keywords["choices"], names), list):
        entry.update(type="choice", choices=_value(keywords["choices"], names))
    elif "type" in keywords and ast.unparse(keywords["type"]) in SCALARS:
        entry["type"] = SCALARS[ast.unparse(keywords["type"])]
    for flag in given:
        flags[flag] = {k: v for k, v in entry.items() if k != "flags"} | {"flags": given}
    return entry


# ---------------------------------------------------------------- Dynamo


def dynamo_flags(wheel: zipfile.ZipFile) -> dict[str, dict[str, Any]]:
    """Per worker module (`trtllm`, `sglang`, `vllm`, `frontend`, `common`): its own flags."""
    groups = {"trtllm": r"dynamo/trtllm/backend_args\.py", "sglang": r"dynamo/sglang/backend_args\.py",
              "vllm": r"dynamo/vllm/backend_args\.py", "frontend": r"dynamo/frontend/frontend_args\.py",
              "common": r"dynamo/common/configuration/groups/[a-z_]+\.py"}
    out: dict[str, dict[str, Any]] = {}
    for group, pattern in groups.items():
        modules = sources(wheel, pattern)
        names = constants(modules)
        flags: dict[str, Any] = {}
        for tree in modules.values():
            for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
                _dynamo_call(call, flags, names)
        for entry in flags.values():
            entry.pop("flags", None)
        out[group] = flags
    return out


def _dynamo_call(call: ast.Call, flags: dict[str, Any], names: dict[str, Any]) -> None:
    func = ast.unparse(call.func).split(".")[-1]
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if func == "add_argument" and "flag_name" in keywords:
        flag = _value(keywords["flag_name"], names)
        if not isinstance(flag, str):  # built in a loop (legacy spellings): not a flag we write
            return
        choices = _value(keywords["choices"], names) if "choices" in keywords else None
        info: dict[str, Any] = ({"type": "choice", "choices": choices} if isinstance(choices, list)
                                else {"type": "any"})
        if "action" in keywords and "store_true" in ast.unparse(keywords["action"]):
            info = {"type": "flag"}
        flags[flag] = info
        for alias_key in ("alias",):
            if alias_key in keywords and isinstance(_value(keywords[alias_key], names), str):
                flags[_value(keywords[alias_key], names)] = dict(info)
    elif func == "add_negatable_bool_argument" and "flag_name" in keywords:
        flag = _value(keywords["flag_name"], names)
        if not isinstance(flag, str):
            return
        flags[flag] = {"type": "flag"}
        flags["--no-" + flag[2:]] = {"type": "flag"}
    elif func == "add_argument":
        _explicit(call, flags, names)


# ---------------------------------------------------------------- TensorRT-LLM (see the module docstring)


def trtllm_keys(aic: zipfile.ZipFile, reference: Path | None) -> dict[str, Any]:
    """LLM-API option keys (dotted for nested ones) named by aiconfigurator's template and the references."""
    template = aic.read(AIC_TEMPLATE).decode("utf-8")
    keys: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in template.splitlines():
        match = re.match(r"^(\s*)([a-z_]+):", line)
        if not match or "{%" in line.split(":")[0]:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        keys.add(".".join([*(k for _, k in stack), key]))
        stack.append((indent, key))
    if reference is not None:
        import yaml

        for path in sorted(reference.glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                for text in _llm_api_documents(document):
                    keys |= set(_dotted(yaml.safe_load(text)))
    return {"source": f"{AICONFIGURATOR[0]}=={AICONFIGURATOR[1]} {AIC_TEMPLATE.split('/')[-1]} and "
                      "../shared/reference/engines (Dynamo's TensorRT-LLM worker configs)",
            "keys": sorted(keys)}


def _llm_api_documents(document: Any) -> list[str]:
    if isinstance(document, dict) and document.get("kind") == "ConfigMap":
        return [v for v in (document.get("data") or {}).values() if isinstance(v, str)]
    if isinstance(document, dict) and "tensor_parallel_size" in document:
        import yaml

        return [yaml.safe_dump(document)]
    return []


def _dotted(data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    out = []
    for key, value in data.items():
        out.append(prefix + str(key))
        if isinstance(value, dict) and key != "initial_global_assignments":
            out += _dotted(value, prefix + str(key) + ".")
    return out


# ---------------------------------------------------------------- main


def record(package: str, version: str, wheel_path: Path, body: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    return {"package": package, "version": version, "wheel": wheel_path.name, "sha256": digest,
            "generated_by": "tools/engine_args.py", **body}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path("/tmp/engine-wheels"), help="download folder")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "export" / "engine_args")
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference" / "engines")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    outputs: dict[str, dict[str, Any]] = {}
    for engine, reader in (("sglang", sglang_flags), ("vllm", vllm_flags)):
        package, version = ENGINE_VERSIONS[engine]
        path = download(package, version, args.wheels)
        with zipfile.ZipFile(path) as wheel:
            outputs[engine] = record(package, version, path, {"flags": dict(sorted(reader(wheel).items()))})
    package, version = ENGINE_VERSIONS["dynamo"]
    path = download(package, version, args.wheels)
    with zipfile.ZipFile(path) as wheel:
        groups = {k: dict(sorted(v.items())) for k, v in dynamo_flags(wheel).items()}
        outputs["dynamo"] = record(package, version, path, {"flags": groups})
    aic = download(*AICONFIGURATOR, args.wheels)
    with zipfile.ZipFile(aic) as wheel:
        package, version = ENGINE_VERSIONS["trtllm"]
        reference = args.reference if args.reference.is_dir() else None
        outputs["trtllm"] = record(*AICONFIGURATOR, aic, {"engine": f"{package}=={version}",
                                                          **trtllm_keys(wheel, reference)})
    for engine, data in outputs.items():
        target = args.out / f"{engine}.json"
        target.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        count = len(data.get("flags", data.get("keys", [])))
        print(f"wrote {target} ({count} entries)")


if __name__ == "__main__":
    main()

"""The model catalog: bundled Hugging Face configs, short aliases, and loading by id, alias or path.

Bundled files live in costmodel/data/models/ as `<org>--<repo>.config.json` (verbatim configs) or
`<org>--<repo>.reconstructed.json` (rebuilt from secondary sources); the catalog id is `org/repo`.
"""

from __future__ import annotations

import difflib
import json
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from costmodel.architecture import Architecture
from costmodel.errors import CatalogError, ConfigError
from costmodel.hf_config import parse_hf_config
from costmodel.safe_load import InputLimitError, key_line, load_json, load_yaml, read_text

_SUFFIXES = (".config.json", ".reconstructed.json")

_ALIASES: dict[str, str] = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "kimi-k2.5": "moonshotai/Kimi-K2.5",
    "kimi-k3": "moonshotai/Kimi-K3",
    "kimi-linear": "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    "qwen3-235b": "Qwen/Qwen3-235B-A22B",
    "qwen3-235b-fp8": "Qwen/Qwen3-235B-A22B-FP8",
    "qwen3-30b": "Qwen/Qwen3-30B-A3B",
    "qwen3-next": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "qwen3.5": "Qwen/Qwen3.5-397B-A17B",
    "qwen3-coder": "Qwen/Qwen3-Coder-480B-A35B-Instruct",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "mixtral-8x22b": "mistralai/Mixtral-8x22B-v0.1",
    "llama4-maverick": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "llama4-scout": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "llama3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "glm-4.5": "zai-org/GLM-4.5",
    "glm-5": "zai-org/GLM-5",
    "minimax-m2.5": "MiniMaxAI/MiniMax-M2.5",
}


def _data_dir() -> resources.abc.Traversable:
    return resources.files("costmodel").joinpath("data", "models")


@lru_cache(maxsize=1)
def _bundled_files() -> dict[str, str]:
    """Catalog id -> file name of every bundled config."""
    files: dict[str, str] = {}
    for entry in _data_dir().iterdir():
        for suffix in _SUFFIXES:
            if entry.name.endswith(suffix):
                files[entry.name[: -len(suffix)].replace("--", "/", 1)] = entry.name
    return files


def model_ids() -> tuple[str, ...]:
    """HF repo ids of the bundled models, sorted case-insensitively."""
    return tuple(sorted(_bundled_files(), key=str.lower))


def aliases() -> dict[str, str]:
    """Short name -> catalog id."""
    return dict(_ALIASES)


@cache
def _catalog_model(model_id: str) -> Architecture:
    text = _data_dir().joinpath(_bundled_files()[model_id]).read_text(encoding="utf-8")
    return parse_hf_config(json.loads(text), model_id)


def _catalog_id(ref: str) -> str | None:
    key = ref.strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    by_lower = {model_id.lower(): model_id for model_id in _bundled_files()}
    return by_lower.get(key)


def load_model(ref: str, base_dir: Path | None = None) -> Architecture:
    """A model by catalog id (any case), alias, or path to a config.json / model YAML (or a folder
    holding a config.json); relative paths are taken from `base_dir` when given."""
    model_id = _catalog_id(ref)
    if model_id is not None:
        return _catalog_model(model_id)
    path = _model_path(ref, base_dir)
    if path is None:
        raise CatalogError(_unknown_message(ref))
    return _load_file(path)


def _model_path(ref: str, base_dir: Path | None) -> Path | None:
    """The model file `ref` names, or None when there is none. Never raises: `~nosuchuser` (RuntimeError), a
    name too long for the file system (OSError) or a NUL byte (ValueError) simply name no file."""
    try:
        path = Path(ref).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        if path.is_dir() and (path / "config.json").is_file():
            path = path / "config.json"
        return path if path.is_file() else None
    except (OSError, RuntimeError, ValueError):
        return None


def _load_file(path: Path) -> Architecture:
    text, data = _read_mapping(path)
    if "groups" in data:  # a normalised model written by Architecture.to_yaml_dict
        try:
            return Architecture.model_validate(data)
        except ValidationError as exc:  # at the key's line, as a config.json's problems are
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            check = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"not a valid normalised model: {where + ': ' if where else ''}{check}", where or None,
                              path, key_line(text, where)) from None
    try:
        return parse_hf_config(data, _name_from_path(path))
    except ConfigError as exc:  # say where in the file
        raise ConfigError(str(exc), exc.field, path, key_line(text, exc.field)) from None


def _name_from_path(path: Path) -> str:
    """`<dir>/config.json` -> dir name; `org--repo.config.json` -> org/repo; otherwise the stem."""
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    for suffix in _SUFFIXES:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)].replace("--", "/", 1)
    return path.stem


def _read_mapping(path: Path) -> tuple[str, dict[str, Any]]:
    """A user's model file (its text and its mapping), read within the input limits of `costmodel.safe_load`."""
    try:
        text = read_text(path)
        data = load_json(text) if path.suffix == ".json" else load_yaml(text)
    except (InputLimitError, yaml.YAMLError) as exc:
        where = f":{exc.line}" if isinstance(exc, InputLimitError) and exc.line else ""
        raise CatalogError(f"cannot read model file {path}{where}: {exc}") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return text, data


def _unknown_message(ref: str) -> str:
    names = [*model_ids(), *_ALIASES]
    by_lower = {name.lower(): name for name in names}
    close = difflib.get_close_matches(ref.strip().lower(), list(by_lower), n=4, cutoff=0.5)
    hint = f" Did you mean: {', '.join(by_lower[c] for c in close)}?" if close else ""
    return (
        f"unknown model {ref!r}.{hint} See `plan catalog models` for the bundled models; a path to a "
        "Hugging Face config.json (or to a model YAML written by `plan import-hf`) also works."
    )

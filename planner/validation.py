"""Turn pydantic validation errors into messages that say file, line, field and what to change."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from planner.errors import InputError, InputProblem
from planner.sourcefile import SourceDocument

ModelT = TypeVar("ModelT", bound=BaseModel)

# pydantic appends the type of a union member to the location (e.g. ('overrides', 'x', 'float'));
# these are not keys of the document.
_UNION_TAGS = frozenset({"int", "float", "str", "bool", "none", "list", "dict", "function-after", "constrained-int",
                         "constrained-float", "constrained-str",
                         "histogram", "uniform",  # `costmodel.lengths.LengthSpec`'s forms
                         "result-file", "result-run"})  # `planner.calibrate.RunSpec.result`'s
# Fields a model fills from another one the document writes: an error in one is reported at the key written
# (a workload's length distribution, given as input_tokens / output_tokens, is validated as input_lengths /
# output_lengths).
_WRITTEN_AS = {"input_lengths": "input_tokens", "output_lengths": "output_tokens"}


def validate_document(model: type[ModelT], document: SourceDocument, what: str) -> ModelT:
    """Validate `document.data` as `model`, or raise an InputError listing every problem."""
    if not isinstance(document.data, dict):
        found = type(document.data).__name__ if document.data is not None else "an empty file"
        raise InputError.single(
            document.path, document.line_of(()), "", f"a {what} must be a YAML mapping of fields, found {found}"
        )
    try:
        return model.model_validate(document.data)
    except ValidationError as exc:
        errors = _deepest(document.data, exc.errors(include_url=False))
        problems = [_problem(model, document, error) for error in errors]
        raise InputError(unique_problems(problems)) from None


def trimmed_errors(data: Any, exc: ValidationError) -> list[ErrorDetails]:
    """A validation's errors as a file's are reported: of a union's members, the one the value was meant for."""
    return _deepest(data, exc.errors(include_url=False))


def _deepest(data: Any, errors: list[ErrorDetails]) -> list[ErrorDetails]:
    """Of a union's errors, keep the one that got furthest into the value: for `{fp8: .inf}` the mapping
    member's "fp8: not finite", not also "not a number", "not an integer", "not a string"."""
    locs = [_document_loc(data, tuple(error["loc"])) for error in errors]
    types: dict[tuple[str | int, ...], set[str]] = {}
    for error, loc in zip(errors, locs, strict=True):
        types.setdefault(loc, set()).add(error["type"])
    return [error for error, loc in zip(errors, locs, strict=True)
            if not (error["type"].endswith("_type") and any(len(o) > len(loc) and o[:len(loc)] == loc for o in locs))
            and not _other_member(error, loc, locs, types[loc])]


_NUMBER_TYPES = frozenset({"int_type", "int_parsing", "float_type", "float_parsing"})


def _other_member(error: ErrorDetails, loc: tuple[str | int, ...], locs: list[tuple[str | int, ...]],
                  siblings: set[str]) -> bool:
    """A union member failing a value meant for another beside it: the word member for a number
    (`front_points: 1`: "should be 'all'" beside "should be >= 2"), the number member for a word where a word
    member is there (`front_points: alll`: "should be a valid integer" beside "should be 'all'"), the mapping
    member for a number or a word (`usd_per_gpu_hour: -1`: "should be a valid dictionary" beside "> 0")."""
    if locs.count(loc) < 2:
        return False
    value = error.get("input")
    word, number = isinstance(value, str), isinstance(value, int | float) and not isinstance(value, bool)
    return ((error["type"] == "literal_error" and not word)
            or (error["type"] in _NUMBER_TYPES and word and "literal_error" in siblings)
            or (error["type"] == "dict_type" and (word or number)))


def unique_problems(problems: list[InputProblem]) -> list[InputProblem]:
    """Each problem once, in order (pydantic can report one field twice through a union)."""
    seen: set[str] = set()
    unique = []
    for problem in problems:
        if str(problem) not in seen:
            seen.add(str(problem))
            unique.append(problem)
    return unique


def _document_loc(data: Any, loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop the union-member tags pydantic adds, keeping any part that is a real key of the document."""
    kept: list[str | int] = []
    for part in loc:
        written = _WRITTEN_AS.get(str(part))
        if isinstance(data, dict) and part not in data and written is not None and written in data:
            part = written
        inside = isinstance(data, dict) and part in data
        inside = inside or (isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data))
        if not inside and (part in _UNION_TAGS or (isinstance(part, str) and "[" in part)):  # e.g. dict[str,float]
            continue
        kept.append(part)
        data = data[part] if inside else None
    return tuple(kept)


def _problem(model: type[BaseModel], document: SourceDocument, error: ErrorDetails) -> InputProblem:
    loc = _document_loc(document.data, tuple(error["loc"]))
    field = ".".join(str(part) for part in loc)
    return InputProblem(document.path, document.line_of(loc), field, _message(model, loc, error))


def _message(model: type[BaseModel], loc: tuple[str | int, ...], error: ErrorDetails) -> str:
    kind = error["type"]
    if kind == "extra_forbidden" and loc:
        return _unknown_field_message(_model_at(model, loc[:-1]), str(loc[-1]))
    if kind == "missing":
        hint = _description(model, loc)
        return "required field is missing" + (f": add it ({hint})" if hint else "")
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "string_type" and isinstance(error.get("input"), int | float):
        message += "; quote the value if it is a name"
    hint = _description(model, loc)
    return f"{message} (got {_short(error.get('input'))})" + (f"; expected: {hint}" if hint else "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown_field_message(model: type[BaseModel] | None, key: str) -> str:
    if model is None:
        return f"unknown field '{key}'; remove it"
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1)
    suggestion = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown field '{key}'; {suggestion}valid fields here: {', '.join(valid)}"


def _description(model: type[BaseModel], loc: tuple[str | int, ...]) -> str | None:
    parent = _model_at(model, loc[:-1]) if loc else None
    if parent is None or not loc or not isinstance(loc[-1], str):
        return None
    field = parent.model_fields.get(loc[-1])
    return field.description if field is not None else None


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model class that validates the value at `loc`, if it is one."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            current = _element_type(current)
        elif _is_model(current) and part in current.model_fields:
            current = _unwrap(current.model_fields[part].annotation)
        else:
            return None
    return current if _is_model(current) else None


def _is_model(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated so nested models can be found."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(members[0]) if len(members) == 1 else annotation
    return annotation


def _element_type(annotation: Any) -> Any:
    args = typing.get_args(_unwrap(annotation))
    return _unwrap(args[0]) if args else None

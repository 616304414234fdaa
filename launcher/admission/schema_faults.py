"""A pydantic schema fault said in words: the first fault of a :class:`ValidationError` as
the error type, the dotted path at fault, the problem and the fix.

In order: the words for each type a value must have, finding the model that validates
the mapping at a path (for the keys it accepts and their descriptions), then
:func:`schema_fault`, one case a kind of fault: an unknown key (with the closest accepted
key), a missing key, a rule's own refusal (``murmur_value``), a wrong type, a bound.
``manifest.py`` turns the result into ``E-MAN-001`` or ``E-MAN-003``.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from launcher.admission.yaml_files import Location, describe_value, dotted, suggest

_TYPE_WORDS = {
    "string_type": "text", "int_type": "a whole number", "float_type": "a number",
    "bool_type": "`true` or `false`", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "int_from_float": "a "
    "whole number", "literal_error": "one of {expected}",
}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _nested_model(argument)
        if found is not None:
            return found
    return None


def model_at(model: type[BaseModel], location: Location) -> type[BaseModel] | None:
    """The model class validating the mapping at ``location`` below ``model``."""
    current: type[BaseModel] | None = model
    for part in location:
        if isinstance(part, int):
            continue
        if current is None or part not in current.model_fields:
            return None
        current = _nested_model(current.model_fields[part].annotation)
    return current


def schema_fault(exc: ValidationError, model: type[BaseModel], document: str
                 ) -> tuple[str, str, str, str]:
    """The first fault of ``exc`` as ``(error type, path, problem, fix)``.

    ``document`` names the file kind in sentences (``murmur.yaml``).
    """
    error = exc.errors(include_url=False)[0]
    location: Location = tuple(error["loc"])
    path = dotted(location)
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    field = model_at(model, location[:-1]) if location else None
    key = location[-1] if location else ""
    description = ""
    if field is not None and isinstance(key, str) and key in field.model_fields:
        description = field.model_fields[key].description or ""
    if kind == "extra_forbidden":
        accepted = sorted(field.model_fields) if field is not None else []
        where = f"under `{dotted(location[:-1])}`" if len(location) > 1 else "at the top"
        close = suggest(str(key), accepted)
        return kind, path, f"`{path}` is not a key {document} accepts", (
            f"{close[2:] + ' ' if close else 'remove it; '}the keys {where} are "
            f"{', '.join(accepted)}")
    if kind == "missing":
        return kind, path, f"`{path}` is required", (
            f"add `{key}`" + (f": {description}" if description else ""))
    if kind == "murmur_value":
        # A rule of a whole mapping may name the entry at fault below the error's location.
        path = dotted(location + tuple(ctx.get("below", ())))
        problem = str(ctx.get("problem", error["msg"]))
        if path:
            problem = f"`{path}` {problem}"
        return kind, path, problem, str(ctx.get("fix", "correct it"))
    if kind == "spawn_beside_authentication":
        return kind, path, str(ctx.get("spawn", "")), ""
    if kind in _TYPE_WORDS:
        wanted = _TYPE_WORDS[kind].format(expected=ctx.get("expected", ""))
        return kind, path, f"`{path}` must be {wanted}, not {describe_value(value)}", (
            f"write {wanted}" + (f" ({description})" if description else ""))
    limits = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}
    if kind in limits:
        words, bound = limits[kind]
        return kind, path, f"`{path}` must be {words} {ctx.get(bound)}, not {value}", (
            f"write a value {words} {ctx.get(bound)}")
    if kind == "too_short":
        return kind, path, (f"`{path}` must have at least {ctx.get('min_length')} "
                            "item(s)"), "add an item"
    return kind, path, f"`{path or 'the document'}` {error['msg'].lower()}", "correct it"

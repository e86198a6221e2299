"""Validation every layer shares: the error that names each bad field and its fix, and how to raise it.

The bottom of the package: pydantic and the standard library only, so the spec, the records, the
environment files, the hooks and the staging pod's CLI all raise the same ``SpecError`` with the
same one-line-per-field message.
"""

from __future__ import annotations

from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class SpecError(ValueError):
    """A spec or record failed validation; the message names every bad field and how to fix it."""


def field_fix(text: str) -> dict[str, Any]:
    """A field's ``json_schema_extra`` naming its fix, which validation errors then say (see ``explain``)."""
    return {"fix": text}


def whole_string_pattern(pattern: str) -> str:
    """``pattern`` (anchored with ``^...$``) for a JSON Schema that Python's ``re`` also evaluates.

    jsonschema checks ``pattern`` with ``re.search``, where ``$`` also matches before a final
    newline, so ``"v1\\n"`` would pass ``^v[0-9]+$``; the lookahead refuses that position, and
    means the same in the ECMA regexes of a browser form. (pydantic's regex engine anchors ``$`` at
    the end of the string already; Python code matches with ``re.fullmatch``.)
    """
    return f"{pattern}(?!\\n)"


def validate_record(model: type[M], data: M | dict[str, Any], title: str | None = None) -> M:
    """Build ``model`` from ``data`` or raise ``SpecError`` with one line per bad field and its fix,
    under ``title`` (default: ``Invalid <model>``)."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(explain(model, exc, title)) from None


def explain(model: type[BaseModel], exc: ValidationError, title: str | None = None) -> str:
    """One line per bad field of ``model``: its key path, what is wrong and the field's fix."""
    lines = [f"{title or 'Invalid ' + model.__name__}:"]
    for err in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        fix = _unknown_key_fix(model, err["loc"]) if err["type"] == "extra_forbidden" else None
        fix = fix or _field_fix(model, err["loc"])
        lines.append(f"  - {field + ': ' if field else ''}{message}" + (f" (fix: {fix})" if fix else ""))
    return "\n".join(lines)


def _unknown_key_fix(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """For a key the model does not know: the keys it does know at that level."""
    container: Any = model
    for part in loc[:-1]:
        if isinstance(part, str):
            info = container.model_fields.get(part) if container is not None else None
            container = _nested_model(info.annotation) if info is not None else None
    if container is None:
        return None
    return f"remove it; the keys here are {', '.join(container.model_fields)}"


def _field_fix(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The ``fix`` of the field at ``loc``, walking into nested models (``vpc.switch_id``)."""
    info = None
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        if info is None:
            return None
        model = _nested_model(info.annotation)
    extra = info.json_schema_extra if info is not None else None
    fix = extra.get("fix") if isinstance(extra, dict) else None
    return fix if isinstance(fix, str) else None


def _nested_model(annotation: Any) -> Any:
    """The model class inside ``annotation`` (``Vpc``, ``Vpc | None``, ``list[Vpc]``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _nested_model(arg)) is not None), None)

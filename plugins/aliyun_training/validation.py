"""Validation every layer shares: the error that names each bad field and its fix, and how to raise it.

The bottom of the package: pydantic and the standard library only, so the spec, the records, the
environment files, the hooks and the staging pod's CLI all raise the same ``SpecError`` with the
same one-line-per-field message.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

M = TypeVar("M", bound=BaseModel)


class SpecError(ValueError):
    """A spec or record failed validation; the message names every bad field and how to fix it.

    Each kind of input has its own subclass beside its model, so a caller can tell whom a message
    is for: ``declaration.DeclarationError`` (a pipeline's author), ``environments.EnvironmentFileError``
    (the administrator) and ``form.TriggerFormError`` (whoever triggered the run). All are SpecError:
    retrying cannot fix any of them, and the tasks fail at once.
    """


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


def validate_record(
    model: type[M], data: M | dict[str, Any], title: str | None = None, error: type[SpecError] = SpecError
) -> M:
    """Build ``model`` from ``data`` or raise ``error`` with one line per bad field and its fix,
    under ``title`` (default: ``Invalid <model>``)."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(explain(model, exc, title)) from None


def explain(model: type[BaseModel], exc: ValidationError, title: str | None = None) -> str:
    """One line per bad field of ``model``: its key path, what is wrong and the field's fix."""
    lines = [f"{title or 'Invalid ' + model.__name__}:"]
    for err in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        fix = _unknown_key_fix(model, err["loc"]) if err["type"] == "extra_forbidden" else None
        fix = fix or _field_fix(model, err["loc"]) or _error_fix(err["type"], err.get("ctx") or {})
        lines.append(f"  - {field + ': ' if field else ''}{message}" + (f" (fix: {fix})" if fix else ""))
    return "\n".join(lines)


#: A fix for a constraint's error, from the bound pydantic reports (for a field that names no fix).
_CONSTRAINT_FIXES = {
    "greater_than_equal": "use a value of at least {ge}",
    "greater_than": "use a value above {gt}",
    "less_than_equal": "use a value of at most {le}",
    "less_than": "use a value below {lt}",
    "literal_error": "use {expected}",
    "enum": "use {expected}",
    "string_pattern_mismatch": "use a value matching {pattern}",
    "string_too_short": "use at least {min_length} character(s)",
    "string_too_long": "use at most {max_length} characters",
    "too_short": "give at least {min_length} item(s)",
    "too_long": "give at most {max_length} item(s)",
    "missing": "add it",
    "int_parsing": "use a whole number",
    "int_type": "use a whole number",
    "int_from_float": "use a whole number",
    "float_parsing": "use a number",
    "float_type": "use a number",
    "bool_parsing": "use true or false",
    "bool_type": "use true or false",
    "string_type": "use a text value",
    "list_type": "use a list",
    "dict_type": "use an object of keys and values",
    "model_type": "use an object of keys and values",
    "model_attributes_type": "use an object of keys and values",
    "finite_number": "use a finite number",
    "date_parsing": "use a date as YYYY-MM-DD, e.g. 2026-01-01",
    "date_from_datetime_parsing": "use a date as YYYY-MM-DD, e.g. 2026-01-01",
    "date_from_datetime_inexact": "use a date as YYYY-MM-DD, e.g. 2026-01-01",
    "date_type": "use a date as YYYY-MM-DD, e.g. 2026-01-01",
}


def _error_fix(kind: str, ctx: dict[str, Any]) -> str | None:
    template = _CONSTRAINT_FIXES.get(kind)
    try:
        return template.format(**ctx) if template else None
    except (KeyError, IndexError):
        return None


def _unknown_key_fix(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """For a key the model does not know: the keys it does know at that level."""
    container, _ = _walk(model, loc[:-1])
    if container is None:
        return None
    return f"remove it; the keys here are {', '.join(container.model_fields)}"


def _field_fix(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The ``fix`` of the field at ``loc``, walking into nested models (``vpc.switch_id``)."""
    _, info = _walk(model, loc)
    extra = info.json_schema_extra if info is not None else None
    fix = extra.get("fix") if isinstance(extra, dict) else None
    return fix if isinstance(fix, str) else None


def _walk(model: Any, loc: tuple[int | str, ...]) -> tuple[Any, Any]:
    """The model at ``loc`` (None past a plain value) and the last field on the way to it.

    A list's index and a mapping's key (``parameters.<name>``) stay in the model of their values.
    """
    info = None
    keyed = False
    for part in loc:
        if isinstance(part, int) or keyed or model is None:
            keyed = False
            continue
        info = model.model_fields.get(str(part))
        if info is None:
            return None, None
        keyed = _is_mapping(info.annotation)
        model = _nested_model(info.annotation)
    return model, info


def _is_mapping(annotation: Any) -> bool:
    """Whether ``annotation`` is a dict (or an optional one), whose keys a validation error's loc names."""
    return get_origin(annotation) is dict or any(_is_mapping(arg) for arg in get_args(annotation))


def _nested_model(annotation: Any) -> Any:
    """The model class inside ``annotation`` (``Vpc``, ``Vpc | None``, ``list[Vpc]``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _nested_model(arg)) is not None), None)


# -- image references -------------------------------------------------------------------------------

# A registry host (with its port) and the repository's path, lower-case as registries require; a tag;
# a digest, which is exactly 64 lower-case hex digits. Each repetition starts with a character the
# one before cannot consume, so jsonschema's backtracking regex engine reads a value in linear time.
_IMAGE_NAME = r"[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9._-]+)*"
_IMAGE_TAG = r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_IMAGE_DIGEST = r"@sha256:[a-f0-9]{64}"
#: An image an administrator names: a repository, with a tag, a digest, both or neither.
IMAGE_REFERENCE_PATTERN = rf"^{_IMAGE_NAME}({_IMAGE_TAG})?({_IMAGE_DIGEST})?$"
#: An image pinned for one run: a tag or a digest, never a bare name (which means whatever is latest).
PINNED_IMAGE_PATTERN = rf"^{_IMAGE_NAME}({_IMAGE_TAG}({_IMAGE_DIGEST})?|{_IMAGE_DIGEST})$"


# -- files an administrator writes ------------------------------------------------------------------

#: The most a declaration or an environment file may hold: each is a page of settings, and a file
#: read on every DAG parse must not be able to fill the parser's memory.
MAX_FILE_BYTES = 1 << 20
#: The deepest a file's values may nest: the models' own nesting is at most five levels, and a
#: parser or validator recursing through thousands of levels would raise RecursionError.
MAX_NESTING = 24


def read_settings_file(path: Path, title: str, error: type[SpecError]) -> str:
    """The text of an administrator's file, or ``error`` naming ``title`` and the fix.

    Only a regular file is read (opened without blocking, so a FIFO named by mistake is refused
    instead of hanging the DAG parse or the command line; ``/dev/zero`` is a device), at most
    :data:`MAX_FILE_BYTES` of it. UTF-8 with or without the byte-order mark some Windows editors
    write: the mark says nothing but the encoding, so it is accepted.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{title} does not exist (fix: create it from the example in the README)") from None
    except OSError as exc:
        raise error(
            f"{title} cannot be read ({exc.strerror}) (fix: make it a file the worker can read)"
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise error(f"{title} is not a regular file (fix: name a file, not a folder, pipe or device)")
        with open(descriptor, "rb", closefd=False) as file:
            data = file.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_FILE_BYTES:
        raise error(
            f"{title} is larger than {MAX_FILE_BYTES // 1024} KiB (fix: a file of settings is a page or "
            "two; name the right file)"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{title} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}; "
            "fix: save it as UTF-8)"
        ) from None


class MisreadValueError(ValueError):
    """Text a parser reads other than as written: a key twice in one object, of which JSON and
    PyYAML keep the last silently (YAML forbids it), or ``NaN``/``Infinity``, which JSON does not have
    and Python's json reads, and which compare false with every bound."""


def duplicate_key(key: object) -> MisreadValueError:
    """The refusal of ``key`` written twice in one object."""
    return MisreadValueError(
        f"the key {key!r} is written twice in one block, and only the last would count "
        "(fix: keep one of them)"
    )


def parse_json_settings(text: str, title: str, error: type[SpecError]) -> Any:
    """The JSON value of an administrator's file: no key twice in an object, nested at most
    :data:`MAX_NESTING` deep, else ``error`` naming ``title`` and the fix."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_not_a_number)
    except MisreadValueError as exc:
        raise error(f"{title}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{title} is not valid JSON: {exc} (fix: correct it at that line and column)") from None
    except RecursionError:
        raise nesting_error(title, error) from None
    if _depth(data) > MAX_NESTING:
        raise nesting_error(title, error)
    return data


def _not_a_number(constant: str) -> float:
    """Python's json reads ``NaN`` and ``Infinity``, which JSON does not have: a bound or price of
    either would compare false with everything."""
    raise MisreadValueError(f"{constant} is not a JSON number (fix: write a finite number)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicate = next((key for index, key in enumerate(keys) if key in keys[:index]), None)
    if duplicate is not None:
        raise duplicate_key(duplicate)
    return dict(pairs)


def _depth(data: Any) -> int:
    """How deep ``data``'s dicts and lists nest, up to one past :data:`MAX_NESTING` (no recursion)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack += [(child, depth + 1) for child in children if depth <= MAX_NESTING]
    return deepest


def nesting_error(title: str, error: type[SpecError]) -> SpecError:
    """The refusal of a file nested deeper than :data:`MAX_NESTING`."""
    return error(
        f"{title} nests its values more than {MAX_NESTING} levels deep (fix: write the settings as "
        "the README shows them; no setting nests that deep)"
    )


#: Variables that make the dynamic loader, a shell or an interpreter run code before or around a
#: job's command, in every process of the node (the platform's launchers and the shells that run
#: the command included), where the dry run's command does not show it.
_HIJACKING_VARIABLES = frozenset(
    {
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5OPT",
        "NODE_OPTIONS",
    }
)
_HIJACKING_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")
#: The fix for a declared environment naming one of them.
HIJACKING_FIX = (
    "remove them; install a library or a startup hook in the image, or set the variable in the "
    "command itself (env LD_LIBRARY_PATH=... python train.py), where the dry run shows it"
)


def hijacking_variables(names: Iterable[str]) -> list[str]:
    """The names of ``names`` that hijack the loader, a shell or an interpreter (``LD_PRELOAD``...)."""
    return sorted(
        name for name in names if name in _HIJACKING_VARIABLES or name.startswith(_HIJACKING_PREFIXES)
    )


# -- patterns an administrator declares -----------------------------------------------------------

#: Characters the backtracking check reasons about: printable ASCII, whitespace and two non-ASCII.
_ALPHABET = frozenset([chr(code) for code in range(0x20, 0x7F)] + ["\t", "\n", "é", "中"])


def check_pattern(pattern: str) -> None:
    """Raise ValueError unless ``pattern`` compiles and cannot backtrack catastrophically.

    The trigger form checks a declared parameter's pattern with Python's backtracking ``re`` (through
    jsonschema) on whatever a triggerer types, in the API server: a pattern with a repeated group
    whose repetitions can match the same text (``(a+)+``, ``(a|aa)*``, ``(\\w+\\s?)*``) takes time
    exponential in the input's length. Such patterns are refused when the declaration loads: a
    quantified group may contain a quantifier or an alternation only when what one repetition starts
    with cannot be consumed by that inner quantifier, and alternatives start differently
    (``(-[a-z0-9]+)*`` and ``(cpu|gpu)+`` pass).
    """
    # The standard library's own regex parser; typeshed has no stubs for these private modules.
    import re._constants as sre  # type: ignore[import-not-found]
    import re._parser as parser  # type: ignore[import-not-found]

    try:
        parsed = parser.parse(pattern)
    except re.error as exc:
        raise ValueError(
            f"{pattern!r} is not a regular expression ({exc}) (fix: correct its syntax)"
        ) from None
    problem = _backtracking(list(parsed), sre)
    if problem:
        raise ValueError(
            f"{pattern!r} can take exponential time on a crafted value ({problem}) (fix: write it so that "
            "a repeated group cannot match the same text in more than one way, e.g. ^[a-z0-9]+(-[a-z0-9]+)*$)"
        )


def _backtracking(items: list[Any], sre: Any) -> str | None:
    """The first ambiguous repetition in a parsed pattern, described, or None."""
    for op, arg in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            _low, high, body = arg
            body = list(body)
            if high > 1 and op is not sre.POSSESSIVE_REPEAT:
                problem = _ambiguous_body(body, sre)
                if problem:
                    return problem
            problem = _backtracking(body, sre)
        else:
            problem = next(
                (found for sub in _children(op, arg, sre) if (found := _backtracking(sub, sre))), None
            )
        if problem:
            return problem
    return None


def _ambiguous_body(body: list[Any], sre: Any) -> str | None:
    """Why one repetition of ``body`` could be split into others, or None."""
    starts = _first(body, sre)
    for op, arg in _descendants(body, sre):
        repeats = op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and arg[1] > 1
        if repeats and _chars(list(arg[2]), sre) & starts:
            return "a quantifier inside a repeated group can consume what the group starts with"
        if op is sre.BRANCH:
            firsts = [_first(list(branch), sre) for branch in arg[1]]
            nullable = any(_nullable(list(branch), sre) for branch in arg[1])
            overlap = any(a & b for i, a in enumerate(firsts) for b in firsts[i + 1 :])
            if overlap or nullable:
                return "alternatives inside a repeated group can match the same text"
    return None


def _children(op: Any, arg: Any, sre: Any) -> list[list[Any]]:
    """The sub-patterns directly inside one parsed item."""
    if op is sre.SUBPATTERN:
        return [list(arg[3])]
    if op is sre.BRANCH:
        return [list(branch) for branch in arg[1]]
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [list(arg[1])]
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        return [list(arg[2])]
    if op is sre.ATOMIC_GROUP:
        return [list(arg)]
    if op is sre.GROUPREF_EXISTS:
        return [list(arm) for arm in arg[1:] if arm is not None]
    return []


def _descendants(items: list[Any], sre: Any) -> list[tuple[Any, Any]]:
    """Every item inside ``items``, at any depth."""
    found = []
    for op, arg in items:
        found.append((op, arg))
        for sub in _children(op, arg, sre):
            found += _descendants(sub, sre)
    return found


def _first(items: list[Any], sre: Any) -> frozenset[str]:
    """The characters a match of ``items`` can start with."""
    starts: set[str] = set()
    for op, arg in items:
        if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            continue
        starts |= _item_first(op, arg, sre)
        if not _item_nullable(op, arg, sre):
            break
    return frozenset(starts)


def _item_first(op: Any, arg: Any, sre: Any) -> frozenset[str]:
    if op in (sre.SUBPATTERN, sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT, sre.ATOMIC_GROUP):
        return frozenset().union(*(_first(sub, sre) for sub in _children(op, arg, sre)))
    if op is sre.BRANCH:
        return frozenset().union(*(_first(list(branch), sre) for branch in arg[1]))
    return _leaf_chars(op, arg, sre)


def _chars(items: list[Any], sre: Any) -> frozenset[str]:
    """Every character a match of ``items`` can consume."""
    chars: set[str] = set()
    for op, arg in items:
        children = _children(op, arg, sre)
        chars |= (
            frozenset().union(*(_chars(sub, sre) for sub in children))
            if children
            else _leaf_chars(op, arg, sre)
        )
    return frozenset(chars)


def _nullable(items: list[Any], sre: Any) -> bool:
    return all(_item_nullable(op, arg, sre) for op, arg in items)


def _item_nullable(op: Any, arg: Any, sre: Any) -> bool:
    if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
        return True
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        return arg[0] == 0 or _nullable(list(arg[2]), sre)
    if op is sre.BRANCH:
        return any(_nullable(list(branch), sre) for branch in arg[1])
    if op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
        return all(_nullable(sub, sre) for sub in _children(op, arg, sre))
    return op is sre.GROUPREF


def _leaf_chars(op: Any, arg: Any, sre: Any) -> frozenset[str]:
    """The characters one character-matching item accepts, within ``_ALPHABET`` (plus its literal)."""
    if op is sre.LITERAL:
        return frozenset({chr(arg)})
    if op is sre.NOT_LITERAL:
        return _ALPHABET - {chr(arg)}
    if op is sre.ANY:
        return _ALPHABET
    if op is sre.IN:
        negate = any(item_op is sre.NEGATE for item_op, _ in arg)
        accepted = frozenset(
            c for c in _ALPHABET if any(_in_item(i_op, i_arg, c, sre) for i_op, i_arg in arg)
        )
        literals = frozenset(chr(i_arg) for i_op, i_arg in arg if i_op is sre.LITERAL)
        return _ALPHABET - accepted if negate else accepted | literals
    # A back reference may repeat anything the group matched.
    return _ALPHABET if op is sre.GROUPREF else frozenset()


def _in_item(op: Any, arg: Any, char: str, sre: Any) -> bool:
    if op is sre.LITERAL:
        return char == chr(arg)
    if op is sre.RANGE:
        return arg[0] <= ord(char) <= arg[1]
    if op is sre.CATEGORY:
        return _CATEGORIES.get(str(arg), lambda _c: True)(char)
    return False


_CATEGORIES: dict[str, Any] = {
    "CATEGORY_DIGIT": str.isdigit,
    "CATEGORY_NOT_DIGIT": lambda c: not c.isdigit(),
    "CATEGORY_SPACE": str.isspace,
    "CATEGORY_NOT_SPACE": lambda c: not c.isspace(),
    "CATEGORY_WORD": lambda c: c.isalnum() or c == "_",
    "CATEGORY_NOT_WORD": lambda c: not (c.isalnum() or c == "_"),
}

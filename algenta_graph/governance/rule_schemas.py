"""What a JSON Schema argument rule may say: what its validator enforces, on the tool's types.

An argument rule checks a call's arguments as the model sent them, before the call runs; the
tool's server may then convert them (FastMCP parses ``"5000"`` into ``5000.0`` for a ``float``
parameter). A constraint of one JSON type ignores a value of another (``maximum`` passes the
text ``"5000"``), and the validator ignores what it does not know (a misspelt ``maximun``, a
``format`` it has no checker for). So a rule's schema is accepted only when each of its
constraints means what it says (:func:`schema_problems`, when the rule is made):

- every keyword is one JSON Schema draft 2020-12 defines and the validator enforces (the
  ``content*`` keywords are annotations only, refused; so are ``$dynamicRef`` and references
  outside the rule's own schema, or naming nothing in it);
- every ``format`` is one the installed format checker checks (:data:`FORMATS`: with
  ``jsonschema[format-nongpl]``, ``date``, ``date-time``, ``time``, ``duration``, ``email``,
  ``idn-email``, ``hostname``, ``idn-hostname``, ``ipv4``, ``ipv6``, ``uri``,
  ``uri-reference``, ``iri``, ``iri-reference``, ``uri-template``, ``uuid``, ``regex``,
  ``json-pointer``, ``relative-json-pointer``); ``email`` only checks for an ``@`` and ``uri``
  admits any scheme, so pair them with a ``pattern``;
- every subschema with a keyword of one type (``maximum``, ``minLength``, ``pattern``,
  ``format``, ``items``, ``properties``, ...) says its ``type`` (its own, or the enclosing
  subschema's through ``allOf`` / ``anyOf`` / ``oneOf`` / ``not`` / ``if``), and that type is
  the keyword's (``null`` may be added); under a negation (``not``, ``if``, ``oneOf``) an
  ``enum`` or ``const`` needs one ``type`` too, since a value of another type never equals it.
  The arguments themselves are an object: the top level needs no ``type``.

A value of another type than the rule's is then denied by ``type`` before the server can
convert it. Against the live catalog (:func:`catalog_problems`, when the graph is built): each
top-level argument a rule names is one that a tool it governs declares, and the rule admits no
type the tool does not take (a rule admitting a string where the tool takes a number would pass
text the server converts past it).

>>> schema_problems({"properties": {"amount": {"type": "number", "maximum": 1000}}})
[]
>>> schema_problems({"properties": {"amount": {"maximum": 1000}}})  # doctest: +ELLIPSIS
['properties/amount: add "type" ...']
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["FORMATS", "catalog_problems", "schema_problems"]

FORMATS: frozenset[str] = frozenset(Draft202012Validator.FORMAT_CHECKER.checkers)
"""The ``format`` values the installed checker checks (the others would only annotate)."""

_NUMBER, _STRING, _ARRAY, _OBJECT = "number", "string", "array", "object"
_TYPED: Mapping[str, str] = {
    **dict.fromkeys(
        ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), _NUMBER
    ),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), _STRING),
    **dict.fromkeys(
        (
            "items",
            "prefixItems",
            "contains",
            "minContains",
            "maxContains",
            "minItems",
            "maxItems",
            "uniqueItems",
            "unevaluatedItems",
        ),
        _ARRAY,
    ),
    **dict.fromkeys(
        (
            "properties",
            "patternProperties",
            "additionalProperties",
            "unevaluatedProperties",
            "propertyNames",
            "required",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
        ),
        _OBJECT,
    ),
}
"""Each keyword that constrains values of one JSON type only, and that type's family."""
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else")
"""Applicators whose subschemas apply to the same value (its type is inherited)."""
_NEGATING = frozenset({"not", "if", "oneOf"})
"""Applicators under which a value failing a subschema can pass the rule."""
_OTHER = frozenset(
    {
        "type",
        "const",
        "enum",
        "$ref",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$vocabulary",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_REFUSED = {
    "contentEncoding": "an annotation only: the validator does not decode or check it",
    "contentMediaType": "an annotation only: the validator does not check it",
    "contentSchema": "an annotation only: the validator does not check it",
    "$dynamicRef": "not supported in argument rules: use $ref to '#/$defs/...'",
}
_CONVERTED = {
    _NUMBER: '"5000" for 5000',
    _STRING: '5000 for "5000"',
    _ARRAY: '"[5000]" for [5000]',
    _OBJECT: '"{}" for {}',
}
"""What a server may convert, per type family: an example for the messages."""
_KNOWN = frozenset(_TYPED) | frozenset(_IN_PLACE) | _OTHER
_JSON_TYPES = {
    "number": _NUMBER,
    "integer": _NUMBER,
    "string": _STRING,
    "boolean": "boolean",
    "array": _ARRAY,
    "object": _OBJECT,
    "null": "null",
}


def _families(value: Any) -> frozenset[str] | None:
    """The type families a ``type`` keyword admits (``integer`` is a ``number``)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return None
    return frozenset(_JSON_TYPES[v] for v in value if v in _JSON_TYPES)


def _family_of(value: Any) -> str:
    """The JSON type family of a value (an ``enum`` or ``const`` member)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    return _ARRAY if isinstance(value, list) else _OBJECT


def schema_problems(schema: Any) -> list[str]:
    """What keeps ``schema`` (a rule's, already a valid JSON Schema) from meaning what it says.

    One text per problem, each naming where (``properties/amount``) and what to write instead;
    none: the rule checks what it appears to (see the module docs).
    """
    problems: list[str] = []
    _walk(schema, "", frozenset({_OBJECT}), False, problems)
    for where, ref in _refs(schema, ""):
        if ref.startswith("#") and _pointer(schema, ref) is None:
            problems.append(f"{where}: $ref {ref!r} names nothing in the rule's schema")
    return problems


def _refs(schema: Any, path: str) -> Iterable[tuple[str, str]]:
    """Every ``$ref`` in ``schema``, with where it is."""
    if isinstance(schema, Mapping):
        if isinstance(schema.get("$ref"), str):
            yield path or "(arguments)", schema["$ref"]
        for key, value in schema.items():
            yield from _refs(value, _join(path, str(key)))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _refs(value, _join(path, str(index)))


def _pointer(root: Any, ref: str) -> Any:
    """What a local reference (``#``, ``#/$defs/x``) points at, or ``None``."""
    target = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            return None
    return target


def _walk(
    schema: Any, path: str, inherited: frozenset[str] | None, negated: bool, out: list[str]
) -> None:
    if not isinstance(schema, Mapping):
        return  # true / false: they mean what they say
    where = path or "(arguments)"
    for key in schema:
        if key in _REFUSED:
            out.append(f"{where}: {key!r} is {_REFUSED[key]}")
        elif key not in _KNOWN:
            near = difflib.get_close_matches(str(key), sorted(_KNOWN), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            out.append(
                f"{where}: {key!r} is not a JSON Schema keyword: the validator would ignore "
                f"it{hint}"
            )
    ref = schema.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        out.append(
            f"{where}: $ref {ref!r} points outside the rule's schema: refer to '#/$defs/...' only"
        )
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt not in FORMATS:
        out.append(
            f"{where}: format {fmt!r} is not checked by the installed format checker (it "
            f"checks {', '.join(sorted(FORMATS))}): use pattern"
        )
    own = _families(schema.get("type"))
    effective = own if inherited is None else inherited if own is None else own & inherited
    _typed_problems(schema, where, effective, negated, out)
    for key in _IN_PLACE:
        below = negated if key not in _NEGATING else (not negated if key == "not" else True)
        for index, sub in _subschemas(schema.get(key)):
            _walk(sub, _join(path, key, index), effective, below, out)
    for key in ("properties", "patternProperties", "dependentSchemas"):
        members = schema.get(key)
        for name, sub in members.items() if isinstance(members, Mapping) else ():
            inner = effective if key == "dependentSchemas" else None
            _walk(sub, _join(path, key, name), inner, negated, out)
    for key in ("additionalProperties", "unevaluatedProperties", "items", "contains"):
        _walk(schema.get(key), _join(path, key), None, negated, out)
    for key in ("prefixItems", "unevaluatedItems"):
        for index, sub in _subschemas(schema.get(key)):
            _walk(sub, _join(path, key, index), None, negated, out)
    _walk(
        schema.get("propertyNames"),
        _join(path, "propertyNames"),
        frozenset({_STRING}),
        negated,
        out,
    )
    for key in ("$defs", "definitions"):
        members = schema.get(key)
        for name, sub in members.items() if isinstance(members, Mapping) else ():
            # a definition may be referred to under a negation: its enums need a type too
            _walk(sub, _join(path, key, name), None, True, out)


def _typed_problems(
    schema: Mapping[str, Any],
    where: str,
    effective: frozenset[str] | None,
    negated: bool,
    out: list[str],
) -> None:
    """The type problems of one subschema's own keywords (see the module docs)."""
    typed = [k for k in schema if k in _TYPED]
    equal = [k for k in ("enum", "const") if k in schema] if negated else []
    if effective is None:
        if typed:
            example = _CONVERTED[_TYPED[typed[0]]]
            out.append(
                f'{where}: add "type" next to {typed[0]}: a value of another type passes '
                f"{typed[0]} unchecked, and the tool may convert it ({example})"
            )
        elif equal:
            out.append(
                f'{where}: add "type" next to {equal[0]} under a negation: a value of another '
                f'type never equals it, so it passes, and the tool may convert it ("5000" for '
                "5000)"
            )
        return
    rest = effective - {"null"}
    for key in typed:
        if not rest or not rest <= {_TYPED[key]}:
            shown = ", ".join(sorted(rest)) or "null"
            out.append(
                f"{where}: {key} applies to {_TYPED[key]} values, but the type here admits "
                f"{shown}: a value of another type passes {key} unchecked; give one type"
            )
    if equal and len(rest) != 1:
        out.append(
            f'{where}: {equal[0]} under a negation needs one "type": a value of another type '
            "never equals it, so it would pass"
        )


def _subschemas(value: Any) -> Iterable[tuple[int | None, Any]]:
    if isinstance(value, list):
        return list(enumerate(value))
    return [(None, value)] if value is not None else []


def _join(path: str, key: str, member: int | str | None = None) -> str:
    part = key if member is None else f"{key}/{member}"
    return f"{path}/{part}" if path else part


def _admitted(schema: Any, root: Mapping[str, Any], depth: int = 0) -> frozenset[str] | None:
    """The type families a (sub)schema admits, when it says (``None``: any, or unknown)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    if "type" in schema:
        return _families(schema["type"])
    if "const" in schema:
        return frozenset({_family_of(schema["const"])})
    if isinstance(schema.get("enum"), list):
        return frozenset(_family_of(v) for v in schema["enum"])
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        return _admitted(_pointer(root, ref), root, depth + 1)
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            found = [_admitted(m, root, depth + 1) for m in members]
            if any(f is None for f in found):
                return None
            return frozenset().union(*(f for f in found if f is not None))
    return None


def catalog_problems(
    schema: Mapping[str, Any], tools: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[str]:
    """What keeps a rule's ``schema`` from checking the arguments ``tools`` receive.

    ``tools``: each tool the rule governs, ``(server.name, its input schema)``. Checked for the
    top-level arguments the rule names under ``properties``: at least one tool must declare
    each (a misspelt argument would constrain nothing), and the rule may admit only the types
    each declaring tool takes (``number`` and ``integer`` are one family here; ``null`` is
    always admitted). Tools that declare no arguments at all are not checked.
    """
    named = schema.get("properties")
    declared: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = [
        (tool, input_schema, props)
        for tool, input_schema in tools
        if isinstance(props := input_schema.get("properties"), Mapping)
    ]
    if not isinstance(named, Mapping) or not declared:
        return []
    problems: list[str] = []
    every = sorted({str(a) for _, _, props in declared for a in props})
    for argument, sub in named.items():
        takers = [(t, s, props[argument]) for t, s, props in declared if argument in props]
        if not takers:
            near = difflib.get_close_matches(str(argument), every, n=2)
            hint = f"; nearest: {', '.join(near)}" if near else f"; they take {', '.join(every)}"
            problems.append(
                f"properties/{argument}: no tool this rule governs takes an argument "
                f"{argument!r}, so it constrains nothing{hint}"
            )
            continue
        admitted = _admitted(sub, schema)
        if admitted is None:
            continue
        for tool, input_schema, prop in takers:
            takes = _admitted(prop, input_schema)
            if takes is None:
                continue
            extra = admitted - takes - {"null"}
            if extra:
                problems.append(
                    f"properties/{argument}: the rule admits {', '.join(sorted(extra))} but "
                    f"{tool} takes {', '.join(sorted(takes - {'null'})) or 'null'}: the server "
                    "may convert such a value past the rule; give the type the tool takes"
                )
    return problems

"""``docs/reference/http-api.md``, rendered from ``pigeond/api/openapi.json``.

The OpenAPI file is the one description of the HTTP API (tests/test_openapi.py holds it
to the routes the daemon serves, and schemathesis fuzzes the daemon against it), so the
manual's reference is made from it rather than written beside it: every path and method,
its summary and description, its parameters, request body and responses with their
status codes, and the schemas they name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

OPENAPI = Path(__file__).resolve().parent.parent / "pigeond" / "api" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch", "head")
SCHEMA_PREFIX = "#/components/schemas/"
RESPONSE_PREFIX = "#/components/responses/"

Json = Mapping[str, Any]


def load() -> Json:
    document: Json = json.loads(OPENAPI.read_text(encoding="utf-8"))
    return document


def cell(text: str) -> str:
    """Text for one table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as a code span, even when it holds backticks."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def schema_anchor(name: str) -> str:
    return f"schema-{name.lower()}"


def operation_anchor(operation: Json) -> str:
    return f"op-{operation['operationId'].lower()}"


def type_text(schema: Json) -> str:
    """What a schema is, in a few words: its type, or a link to the named schema."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(SCHEMA_PREFIX):
        name = ref.removeprefix(SCHEMA_PREFIX)
        return f"[{name}](#{schema_anchor(name)})"
    kinds = schema.get("type")
    if kinds is None:
        alternatives = schema.get("oneOf") or schema.get("anyOf") or []
        if alternatives:
            return " or ".join(dict.fromkeys(type_text(a) for a in alternatives))
        values = [schema["const"]] if "const" in schema else schema.get("enum", [])
        named = dict.fromkeys(json_type(v) for v in values)
        return " or ".join(named) if named else "any"
    names = [kinds] if isinstance(kinds, str) else list(kinds)
    words = []
    for kind in names:
        if kind == "array" and "items" in schema:
            words.append(f"array of {type_text(schema['items'])}")
        elif kind == "object" and schema.get("properties"):
            fields = ", ".join(f"`{name}`" for name in schema["properties"])
            words.append(f"object ({fields})")
        else:
            words.append(kind)
    return " or ".join(words)


def json_type(value: object) -> str:
    """The JSON Schema type of a value a schema names (in ``const`` or ``enum``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def rule_text(schema: Json) -> str:
    """The constraints a value must meet: patterns, choices, bounds, defaults."""
    rules = []
    if "pattern" in schema:
        rules.append(f"matches {code(schema['pattern'])}")
    alternatives = [a["pattern"] for a in schema.get("anyOf", []) if "pattern" in a]
    if alternatives:
        rules.append("matches " + " or ".join(code(p) for p in alternatives))
    if "pattern" in schema.get("not", {}):
        rules.append(f"not {code(schema['not']['pattern'])}")
    if "enum" in schema:
        rules.append("one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"]))
    if "const" in schema:
        rules.append(f"always {code(json.dumps(schema['const']))}")
    for key, word in (("minimum", "at least"), ("maximum", "at most")):
        if key in schema:
            rules.append(f"{word} {schema[key]}")
    for key, word in (("minLength", "at least"), ("maxLength", "at most")):
        if key in schema:
            rules.append(f"{word} {schema[key]} characters")
    for key, word in (("minItems", "at least"), ("maxItems", "at most")):
        if key in schema:
            rules.append(f"{word} {schema[key]} items")
    if "default" in schema:
        rules.append(f"default {code(json.dumps(schema['default']))}")
    if schema.get("format"):
        rules.append(f"format {schema['format']}")
    return "; ".join(rules)


def field_rows(schema: Json) -> list[str]:
    """A table of an object schema's properties (nothing for a schema without them)."""
    properties: Json = schema.get("properties", {})
    if not properties:
        return []
    required = set(schema.get("required", []))
    rows = ["| field | type | required | rule | description |", "|---|---|---|---|---|"]
    for name, prop in properties.items():
        rows.append(
            f"| `{name}` | {cell(type_text(prop))} | {'yes' if name in required else 'no'} "
            f"| {cell(rule_text(prop))} | {cell(prop.get('description', ''))} |"
        )
    return rows


def resolve_response(document: Json, response: Json) -> Json:
    ref = response.get("$ref")
    if isinstance(ref, str) and ref.startswith(RESPONSE_PREFIX):
        resolved: Json = document["components"]["responses"][ref.removeprefix(RESPONSE_PREFIX)]
        return resolved
    return response


def body_type(content: Json) -> str:
    """The type of a JSON body, or of whatever media type the content names."""
    for media, entry in content.items():
        schema = entry.get("schema")
        text = type_text(schema) if schema else "no schema"
        return text if media == "application/json" else f"{text} ({code(media)})"
    return ""


def operations(document: Json) -> Iterator[tuple[str, str, Json]]:
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method.upper(), item[method]


def operation_section(document: Json, path: str, method: str, operation: Json) -> list[str]:
    out = [f"## {method} {code(path)} {{#{operation_anchor(operation)}}}", ""]
    out += [operation["summary"] + ".", ""]
    if operation.get("description"):
        out += [operation["description"], ""]
    security = operation.get("security", document.get("security"))
    out += ["Authentication: " + ("the bearer token over TCP." if security else "none."), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        out += ["**Parameters**", ""]
        out += ["| name | in | type | required | rule | description |", "|---|---|---|---|---|---|"]
        for p in parameters:
            schema = p.get("schema", {})
            out.append(
                f"| `{p['name']}` | {p['in']} | {cell(type_text(schema))} "
                f"| {'yes' if p.get('required') else 'no'} | {cell(rule_text(schema))} "
                f"| {cell(p.get('description', ''))} |"
            )
        out.append("")
    body = operation.get("requestBody")
    if body:
        out += ["**Request body**" + (" (required)" if body.get("required") else ""), ""]
        out += [f"{body_type(body['content'])}, as `application/json`.", ""]
        example = body["content"].get("application/json", {}).get("example")
        if example is not None:
            out += ["```json", json.dumps(example, ensure_ascii=False), "```", ""]
    out += ["**Responses**", "", "| status | body | meaning |", "|---|---|---|"]
    for status, response in operation["responses"].items():
        answer = resolve_response(document, response)
        headers = ", ".join(f"`{h}`" for h in answer.get("headers", {}))
        meaning = answer.get("description", "") + (f" Headers: {headers}." if headers else "")
        kind = body_type(answer.get("content", {}))
        out.append(f"| {status} | {cell(kind)} | {cell(meaning)} |")
    return [*out, ""]


def schema_section(name: str, schema: Json) -> list[str]:
    out = [f"### {name} {{#{schema_anchor(name)}}}", ""]
    summary = type_text({k: v for k, v in schema.items() if k != "properties"})  # the table
    rules = rule_text(schema)
    out += [f"Type: {summary}" + (f"; {rules}" if rules else "") + ".", ""]
    if schema.get("description"):
        out += [schema["description"], ""]
    choices = schema.get("oneOf") or schema.get("anyOf") or []
    named = [type_text(c) for c in choices if "$ref" in c]
    if named:
        out += ["One of: " + ", ".join(named) + ".", ""]
    rows = field_rows(schema)
    if "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        out += [f"Each value: {type_text(schema['additionalProperties'])}.", ""]
    return [*out, *rows, ""] if rows else out


def render(document: Json, generated_note: str) -> str:
    info = document["info"]
    out = ["# HTTP API reference", "", generated_note, ""]
    out += [f"{info['title']} {info['version']}: {info['summary']}.", ""]
    out += [info["description"], ""]
    schemes = document["components"].get("securitySchemes", {})
    for name, scheme in schemes.items():
        out += [f"Security scheme `{name}` ({scheme['type']}, {scheme.get('scheme', '')}): "
                f"{scheme.get('description', '')}", ""]  # fmt: skip
    servers = ", ".join(f"`{s['url']}` ({s.get('description', '')})" for s in document["servers"])
    out += [f"Server: {servers}.", "", "| method | path | what |", "|---|---|---|"]
    for path, method, operation in operations(document):
        link = f"[{code(path)}](#{operation_anchor(operation)})"
        out.append(f"| {method} | {link} | {cell(operation['summary'])} |")
    out.append("")
    for path, method, operation in operations(document):
        out += operation_section(document, path, method, operation)
    out += ["## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        out += schema_section(name, schema)
    return "\n".join(out).rstrip() + "\n"

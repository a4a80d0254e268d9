"""The workload file's schema (dataplane/schema/workload.schema.json) and validate(): the
first violation as one line naming the file and the field."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import jsonschema

from dataplane.errors import WorkloadError

# dataplane/schema/workload.schema.json, beside the containerlab schema. Its "x-hint"s are
# what validate() says instead of a raw regex / anyOf message; its patterns and enums are
# this package's own (a unit test holds them equal).
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schema" / "workload.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _resolved(node: Any) -> Any:
    """A schema node with its local "$ref" ("#/$defs/size") followed."""
    while isinstance(node, dict) and "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rpartition("/")[2]]
    return node


def _path_str(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def validate(doc: Any, source: str = "<workload>") -> None:
    """Raise WorkloadError('file: field: problem') for the first schema violation."""
    v = jsonschema.Draft202012Validator(SCHEMA)
    e = jsonschema.exceptions.best_match(v.iter_errors(doc))
    if e is None:
        return
    msg = e.message
    hint = None
    node: Any = SCHEMA
    for k in e.absolute_schema_path:      # jsonschema leaves "$ref" out of the path
        node = _resolved(node)
        if isinstance(node, dict) and "x-hint" in node:
            hint = node["x-hint"]
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            break
    if hint and e.validator in ("anyOf", "oneOf", "pattern", "type", "minimum",
                                "exclusiveMinimum"):
        msg = f"{e.instance!r} is not {hint}"
    elif e.validator in ("anyOf", "oneOf"):
        msg = f"{e.instance!r} is not a valid value"
    raise WorkloadError(f"{source}: {_path_str(e.absolute_path)}: {msg}".replace("\n", " "))

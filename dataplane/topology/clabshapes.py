"""A large lab's links, one per shape, for the containerlab schema: a 16,384-GPU lab has
49,152 links that differ only in their names and addresses, and jsonschema took 8 s to walk
them all. A brief link (no `type`) can only match the schema's link-config-short, which
leaves endpoint strings free (their `prefixItems` is a 2020-12 keyword the draft-07 schema
does not enforce), checks ipv4/ipv6 items against a pattern and every list for unique items,
and takes any mapping as `vars`. Two brief links with the same shape (keys, list lengths,
item types, which items are equal, which match the patterns, any other value as it is)
are therefore valid or invalid together, and one of them stands for all."""
from __future__ import annotations

import json
import re

SHORT = "link-config-short"


def _items(value, pattern) -> tuple:
    """What the schema can tell about a list of strings: length, types, which items equal an
    earlier one, which match the pattern."""
    if not isinstance(value, list):
        return ("raw", json.dumps(value, sort_keys=True, default=repr))
    return ("list", tuple(
        (type(item).__name__, value.index(item),
         bool(pattern.search(item)) if pattern is not None and isinstance(item, str) else None)
        for item in value))


def _patterns(schema: dict) -> dict[str, re.Pattern | None]:
    props = schema["definitions"][SHORT]["properties"]
    out: dict[str, re.Pattern | None] = {"endpoints": None}
    for key in ("ipv4", "ipv6"):
        pattern = props.get(key, {}).get("items", {}).get("pattern")
        out[key] = re.compile(pattern) if pattern else None
    return out


def shape(link, patterns: dict[str, re.Pattern | None]) -> tuple | None:
    """The link's shape as far as the schema can see it, or None for a link that is not
    brief (it is validated as it is)."""
    if not isinstance(link, dict) or "type" in link:
        return None
    out = []
    for key in sorted(link, key=str):
        value = link[key]
        if key in patterns:
            out.append((key, _items(value, patterns[key])))
        elif key == "vars" and isinstance(value, dict):
            out.append((key, "mapping"))
        else:
            out.append((key, json.dumps(value, sort_keys=True, default=repr)))
    return tuple(out)


def one_per_shape(links: list, schema: dict) -> list:
    """The first link of each shape, and every link that is not brief, in their order."""
    patterns = _patterns(schema)
    seen: set[tuple] = set()
    out = []
    for link in links:
        key = shape(link, patterns)
        if key is None or key not in seen:
            if key is not None:
                seen.add(key)
            out.append(link)
    return out

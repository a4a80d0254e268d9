"""Size limits of dataplane/: no class over 300 lines, no module over 500, unless
docs/dev/layout.md lists it under "## Over the size limits" with its reason."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "docs" / "dev" / "layout.md"
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 500


def oversized(root: Path) -> dict[str, int]:
    """"path" (module) or "path:Class" -> its lines, for each over its limit."""
    found = {}
    for path in sorted((root / "dataplane").rglob("*.py")):
        text = path.read_text()
        name = str(path.relative_to(root))
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                found[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def allowed(text: str) -> dict[str, str]:
    """The allow-list: "path" or "path:Class" -> the reason given for it."""
    section = ("\n" + text).split("\n## Over the size limits", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n- ", "\n" + section.split("\n- ", 1)[1]) if "\n- " in section else []
    out = {}
    for item in filter(None, items):
        m = re.match(r"`([^`]+)` \((?:module|class)\):\s*(.*)", " ".join(item.split()))
        assert m, f"an entry of {LAYOUT.name}'s size allow-list reads `path` (module|class): reason: {item!r}"
        out[m.group(1)] = m.group(2)
    return out


def test_every_oversized_module_and_class_is_listed_with_a_reason():
    listed = allowed(LAYOUT.read_text())
    found = oversized(ROOT)
    unlisted = {name: lines for name, lines in found.items() if name not in listed}
    assert not unlisted, (f"over {MAX_CLASS_LINES} lines (class) or {MAX_MODULE_LINES} (module), "
                          f"not in {LAYOUT.name}: {unlisted}")
    assert all(len(reason) >= 20 for reason in listed.values()), listed


def test_the_allow_list_names_only_what_is_over_a_limit():
    stale = sorted(set(allowed(LAYOUT.read_text())) - set(oversized(ROOT)))
    assert not stale, f"listed in {LAYOUT.name} but within the limits now (take them off): {stale}"


def test_the_check_finds_a_long_class_and_a_long_module(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (tmp_path / "dataplane").mkdir()
    (tmp_path / "dataplane" / "big.py").write_text(f"class Big:\n{body}\n" + "y = 1\n" * 200)
    (tmp_path / "dataplane" / "small.py").write_text("class Small:\n    pass\n")
    assert oversized(tmp_path) == {"dataplane/big.py": MAX_CLASS_LINES + 201,
                                   "dataplane/big.py:Big": MAX_CLASS_LINES + 1}
    listed = allowed("## Over the size limits\n\ntext\n\n- `dataplane/big.py` (module): a reason long enough\n"
                     "  to wrap.\n")
    assert listed == {"dataplane/big.py": "a reason long enough to wrap."}

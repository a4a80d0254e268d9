"""Checks on the sources themselves: comments that must say what the code does, test
markers that must stay narrow."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _comments(text: str) -> list[str]:
    return re.findall(r"/\*.*?\*/", text, re.S)


def test_bpf_comments_do_not_say_xdp_tx_where_the_code_redirects():
    """ARP replies leave by a redirect to the ingress port (XDP_TX only with
    PORT_F_ARP_XDP_TX): a comment naming XDP_TX must say so."""
    wrong = [f"{path.name}: {c[:80]!r}" for path in sorted((ROOT / "bpf").glob("*.[ch]"))
             for c in _comments(path.read_text()) if "XDP_TX" in c and "redirect" not in c]
    assert not wrong, wrong


def test_reruns_are_marked_on_timing_bound_tests_only():
    """A rerun marker on a whole module retries deterministic failures too."""
    marked = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("test_*.py"))
              if re.search(r"^pytestmark\s*=.*flaky", path.read_text(), re.M)]
    assert not marked, marked


def _local_imports_without_a_reason(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = (ast.get_docstring(fn) or "").lower()
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or "lazily" in doc or "deferred" in doc:
                continue
            above = node.lineno - 1         # up to the line above the block of imports it stands in
            block = []
            while above >= 0 and (not lines[above].strip() or lines[above].lstrip().startswith(("import ", "from "))):
                block.append(lines[above])
                above -= 1
            said = any("#" in line for line in block) or (above >= 0 and lines[above].lstrip().startswith("#"))
            if not said:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return found


def test_imports_inside_functions_say_why():
    """Imports belong at the top of a module (the dependency graph in one place); one
    deferred on purpose (bcc, scapy, matplotlib, aiohttp) says so in a comment."""
    found = [line for path in sorted((ROOT / "dataplane").rglob("*.py"))
             for line in _local_imports_without_a_reason(path)]
    assert not found, found

"""The import graph of dataplane/: no cycle between modules, no import upward across the
layers, and the agent imports no client module.

The layers are the numbered list under "## Layers" in docs/dev/layout.md, bottom first:
a module may import its own area (its folder under dataplane/, or a top-level leaf
module) and any area of a lower layer, nothing else. Every import counts, at the top of
a module or inside a function: one deferred for speed still runs."""
from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "docs" / "dev" / "layout.md"
PACKAGE = "dataplane"
# what runs on the client's side of the agent's socket: the agent's own modules (the
# server, programmer, monitor, ...) import none of them
CLIENT_MODULES = ("dataplane.lab", "dataplane.agent.client")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """The package's modules that `path` (module `module`) imports, anywhere in it. `from
    a.b import c` names module a.b.c when there is one, else a.b."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for alias in node.names:
                found.add(f"{name}.{alias.name}" if f"{name}.{alias.name}" in modules else name)
    return {name for name in found
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and name != module}


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports, for every module under root/dataplane."""
    paths = {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    return {module: imports_of(path, module, set(paths)) for module, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a, b, ..., a) per strongly connected set of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:            # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.add(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(_a_cycle(graph, min(members), members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _a_cycle(graph: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    """The shortest way from start back to itself inside members (breadth first)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]                  # v, back to start
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    return sorted(members)


def area(module: str) -> str:
    """dataplane.agent.monitor -> agent; dataplane.units -> units; dataplane -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def documented_layers(text: str) -> list[set[str]]:
    """The areas of each layer, bottom first: the numbered items under "## Layers", each
    naming its areas in backquotes before a colon."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    return [set(re.findall(r"`([a-z_]+)`", head))
            for head in re.findall(r"^\d+\.\s+(.*?):", section, re.M)]


def upward_imports(graph: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    """Imports of an area of the same layer or a higher one (its own area aside)."""
    level = {name: i for i, names in enumerate(layers) for name in names}
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = area(module), area(target)
            if not mine or not theirs or mine == theirs:
                continue
            if level[theirs] >= level[mine]:
                wrong.append(f"{module} (layer {level[mine] + 1}) imports {target} (layer {level[theirs] + 1})")
    return wrong


def client_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{module} imports {target}" for module, targets in sorted(graph.items())
            if area(module) == "agent" and module not in CLIENT_MODULES
            for target in sorted(targets)
            if any(target == c or target.startswith(c + ".") for c in CLIENT_MODULES)]


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT)


@pytest.fixture(scope="module")
def layers():
    return documented_layers(LAYOUT.read_text())


def test_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, [" -> ".join(c) for c in found]


def test_every_area_has_one_layer(graph, layers):
    named = [name for names in layers for name in names]
    assert len(named) == len(set(named)), f"an area in two layers: {sorted(named)}"
    unplaced = sorted({area(m) for m in graph} - set(named) - {""})
    assert not unplaced, f"areas of dataplane/ in no layer of {LAYOUT.name}: {unplaced}"


def test_no_import_goes_up(graph, layers):
    found = upward_imports(graph, layers)
    assert not found, found


def test_the_agent_imports_no_client_module(graph):
    found = client_imports(graph)
    assert not found, found


# ------------------------------------------------------------------ the checker itself

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_finds_an_upward_import(tmp_path, layers):
    """A module of a low layer importing the CLI, at the top or inside a function, fails."""
    root = _tree(tmp_path, {
        "dataplane/__init__.py": "", "dataplane/units.py": "",
        "dataplane/xdp/__init__.py": "", "dataplane/cli/__init__.py": "", "dataplane/cli/main.py": "",
        "dataplane/xdp/ok.py": "from dataplane import units\n",
        "dataplane/xdp/top.py": "from dataplane.cli import main\n",
        "dataplane/xdp/inner.py": "def f():\n    import dataplane.cli.main\n",
        "dataplane/xdp/relative.py": "from ..cli.main import run\n",
    })
    found = upward_imports(import_graph(root), layers)
    assert [line.split(" (")[0] for line in found] == [
        "dataplane.xdp.inner", "dataplane.xdp.relative", "dataplane.xdp.top"], found
    assert all("imports dataplane.cli.main" in line for line in found)


def test_the_checker_finds_a_sideways_import(layers):
    """Two areas of one layer do not import each other either."""
    graph = {"dataplane.wire.pfc": {"dataplane.topology.model"}, "dataplane.topology.model": set()}
    assert upward_imports(graph, layers) == [
        "dataplane.wire.pfc (layer 5) imports dataplane.topology.model (layer 5)"]


def test_the_checker_finds_a_cycle_and_names_it():
    graph = {"dataplane.report.a": {"dataplane.report.b"}, "dataplane.report.b": {"dataplane.report.c"},
             "dataplane.report.c": {"dataplane.report.a", "dataplane.units"}, "dataplane.units": set(),
             "dataplane.report.d": {"dataplane.report.a"}}
    assert cycles(graph) == [["dataplane.report.a", "dataplane.report.b", "dataplane.report.c",
                              "dataplane.report.a"]]


def test_the_checker_finds_the_agent_importing_a_client_module():
    graph = {"dataplane.agent.kernelswitches": {"dataplane.lab.fabric"},
             "dataplane.agent.server": {"dataplane.agent.client"},
             "dataplane.agent.client": {"dataplane.agent.protocol"}}
    assert client_imports(graph) == ["dataplane.agent.kernelswitches imports dataplane.lab.fabric",
                                     "dataplane.agent.server imports dataplane.agent.client"]

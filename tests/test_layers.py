"""The import graph keeps the layers docs/design.md states ("Layers").

Every import of every module under narad/ counts: at module level, inside a
function, and under `if TYPE_CHECKING:` alike, since each stands for code that uses
the other module. The layer order is read from the `layers` block of
docs/design.md, top to bottom, so the page and this test cannot disagree.

- No import circle across modules, but the one named in SAME_CLASS with its reason.
- No module imports one of a layer above its own.
- Every module has a layer.
- No command handler reaches the server or a connection: handlers take a Session
  and reach only what it and its Node expose (narad/node.py).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "narad"
DESIGN = ROOT / "docs" / "design.md"

# Modules that are one class split into several files on purpose, and why.
SAME_CLASS = {
    frozenset({"narad.log.log", "narad.log.opening", "narad.log.reading"}): (
        "narad/log/log.py's Log: opening (recovery of a log's files) and reading "
        "(lookups by offset and ID) are its methods' bodies, kept in files of their own "
        "for size; each part takes the Log it works on"
    ),
}


def modules() -> dict[str, Path]:
    """Every module under narad/, by dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the narad modules it imports, anywhere in its source."""
    graph: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def layers() -> list[tuple[str, list[str]]]:
    """(layer, module patterns), top to bottom, from docs/design.md's layers block."""
    block = re.search(r"```layers\n(.*?)```", DESIGN.read_text(), re.S)
    assert block, "docs/design.md has no ```layers block"
    out = []
    for line in block.group(1).splitlines():
        if line.strip():
            layer, _, patterns = line.strip().partition(" ")
            out.append((layer, ["narad." + p if p != "narad" else p for p in patterns.split()]))
    return out


def layer_of(name: str, order: list[tuple[str, list[str]]]) -> int | None:
    for index, (_, patterns) in enumerate(order):
        if any(fnmatch.fnmatchcase(name, p) or name == p.removesuffix(".*") for p in patterns):
            return index
    return None


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(part)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle() -> None:
    found = [c for c in circles(imports(modules())) if frozenset(c) not in SAME_CLASS]
    assert not found, f"import circles: {[sorted(c) for c in found]}"


def test_every_module_has_a_layer() -> None:
    order = layers()
    missing = sorted(name for name in modules() if layer_of(name, order) is None)
    assert not missing, f"modules in no layer of docs/design.md: {missing}"


def test_no_module_imports_a_higher_layer() -> None:
    order = layers()
    upward = []
    for name, targets in sorted(imports(modules()).items()):
        mine = layer_of(name, order)
        for target in sorted(targets):
            theirs = layer_of(target, order)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{name} ({order[mine][0]}) -> {target} ({order[theirs][0]})")
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_no_handler_reaches_the_server_or_a_connection() -> None:
    handlers = [*sorted((PACKAGE / "commands").glob("*.py")), PACKAGE / "info.py"]
    found = []
    for path in handlers:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "server":
                found.append(f"{path.name}:{node.lineno} reads .server")
    graph = imports(modules())
    for name, targets in graph.items():
        if name.startswith("narad.commands") or name == "narad.info":
            for target in targets & {"narad.server", "narad.connection", "narad.dispatch"}:
                found.append(f"{name} imports {target}")
    assert not found, "\n".join(found)


def test_the_scan_sees_every_kind_of_import() -> None:
    """The scan itself: a function-level and a TYPE_CHECKING import both count."""
    graph = imports(modules())
    assert "narad.streams.pel" in graph["narad.streams.stream"]  # under TYPE_CHECKING
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]

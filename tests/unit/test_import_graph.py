"""The package's imports point one way: impl.py -> runtime/ -> delta/, sql/, with layout.py,
errors.py and faults.py below runtime/ and delta/. Every `import` statement of every module
under dbt/adapters/spark_streaming counts, those inside functions included: a lazy import
still ties the two modules together, it only defers the failure.

Read the graph yourself: `.venv/bin/python tests/unit/test_import_graph.py` prints one line per
import between the package's modules, then any cycle."""

from __future__ import annotations

import ast
import pathlib
import sys
from dataclasses import dataclass

PACKAGE = "dbt.adapters.spark_streaming"
ROOT = pathlib.Path(__file__).resolve().parents[2] / "dbt" / "adapters" / "spark_streaming"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, relative to the package: "runtime.streaming"
    target: str  # a module of the package ("runtime.catalog"), or outside: "pyspark"
    line: int

    def __str__(self) -> str:
        return f"{_file(self.source)}:{self.line} imports {_file(self.target)}"


def _modules() -> dict[str, pathlib.Path]:
    """Module name (relative to the package; '' is the package itself) -> file."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _file(module: str) -> str:
    """The module's file, relative to the package (its name if it is no module of it)."""
    return str(MODULES[module].relative_to(ROOT)) if module in MODULES else module


def _inside(absolute: str) -> str | None:
    """`absolute` (a dotted module name) relative to the package, or None if it is outside."""
    if absolute == PACKAGE:
        return ""
    if absolute.startswith(PACKAGE + "."):
        return absolute[len(PACKAGE) + 1 :]
    return None


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _targets(module: str, node: ast.AST) -> list[str]:
    """What one import statement of `module` imports: modules of the package, or outside
    top-level names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
        inside = [_inside(n) for n in names]
        return [
            _nearest(i) if i is not None else n.split(".")[0]
            for n, i in zip(names, inside, strict=True)
        ]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        is_package = MODULES[module].name == "__init__.py"
        base = module.split(".") if module else []
        up = node.level - 1 if is_package else node.level
        base = base[: len(base) - up] if up else base
        origin = _join(*base, node.module or "")
    else:
        origin = _inside(node.module or "")
        if origin is None:
            return [(node.module or "").split(".")[0]]
    # `from pkg import name`: name is a module of the package, or something pkg defines.
    return [
        _join(origin, a.name) if _join(origin, a.name) in MODULES else _nearest(origin)
        for a in node.names
    ]


def _nearest(module: str) -> str:
    """The module itself, or the nearest enclosing package that exists."""
    while module not in MODULES:
        module = module.rpartition(".")[0]
    return module


def imports() -> list[Import]:
    """Every import of every module of the package, once per (module, target, line)."""
    out: dict[Import, None] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update((Import(module, t, node.lineno), None) for t in _targets(module, node))
    return list(out)


def _internal(edges: list[Import]) -> dict[str, list[Import]]:
    graph: dict[str, list[Import]] = {m: [] for m in MODULES}
    for e in edges:
        if e.target in MODULES and e.target != e.source:
            graph[e.source].append(e)
    return graph


def find_cycle(graph: dict[str, list[Import]]) -> list[Import] | None:
    """One cycle of imports (each edge's target is the next one's source), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[Import] = []

    def visit(module: str) -> list[Import] | None:
        state[module] = 1
        for edge in graph[module]:
            if state.get(edge.target) == 1:
                start = next(i for i, e in enumerate(path) if e.source == edge.target)
                return path[start:] + [edge]
            if edge.target not in state:
                path.append(edge)
                found = visit(edge.target)
                if found:
                    return found
                path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def find_cycles(graph: dict[str, list[Import]]) -> list[dict[str, list[Import]]]:
    """The groups of modules that import each other (strongly connected components), each
    as the imports among its modules."""
    reach = {m: _reachable(graph, m) for m in graph}
    groups, seen = [], set()
    for module in sorted(graph):
        group = {m for m in reach[module] if module in reach[m]}
        if module in seen or module not in group:
            continue
        seen |= group
        groups.append({m: [e for e in graph[m] if e.target in group] for m in sorted(group)})
    return groups


def _reachable(graph: dict[str, list[Import]], start: str) -> set[str]:
    """The modules that `start` imports, directly or not (itself only through a cycle)."""
    found: set[str] = set()
    todo = [e.target for e in graph[start]]
    while todo:
        m = todo.pop()
        if m not in found:
            found.add(m)
            todo += [e.target for e in graph[m]]
    return found


def _show(groups: list[dict[str, list[Import]]]) -> str:
    """Per group: one cycle through it, then every import among its modules."""
    out = []
    for group in groups:
        cycle = find_cycle(group) or []
        out.append(
            "import cycle: "
            + " -> ".join([cycle[0].source] + [e.target for e in cycle])
            + f"\n  among {', '.join(group)}:"
            + "".join(f"\n  {e}" for edges in group.values() for e in edges)
        )
    return "\n".join(out)


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _broken(edges: list[Import], rule) -> str:
    bad = [str(e) for e in edges if rule(e)]
    return "\n  ".join(bad)


EDGES = imports()


def test_the_graph_is_read():
    """A sanity check of the reader itself: known imports are found."""
    found = {(e.source, e.target) for e in EDGES}
    assert ("", "impl") in found  # a function-level import, by absolute name
    assert ("impl", "connections") in found  # a relative import
    assert ("delta.sink", "faults") in found  # `from ..faults import ...`
    assert ("sql.dialect", "sqlglot") in found  # an outside package, by its top-level name


def test_no_import_cycles():
    cycles = find_cycles(_internal(EDGES))
    assert not cycles, _show(cycles)


def test_sql_imports_neither_spark_nor_dbt_nor_the_rest_of_the_package():
    def rule(e: Import) -> bool:
        if not _under(e.source, "sql"):
            return False
        if e.target in MODULES:
            return not _under(e.target, "sql")
        return e.target in ("pyspark", "dbt", "dbt_common", "deltalake")

    assert not _broken(EDGES, rule), "sql/ must stay pure:\n  " + _broken(EDGES, rule)


def test_delta_imports_no_runtime():
    def rule(e: Import) -> bool:
        return _under(e.source, "delta") and e.target in MODULES and _under(e.target, "runtime")

    assert not _broken(EDGES, rule), "delta/ must not import runtime/:\n  " + _broken(EDGES, rule)


def test_only_the_package_init_imports_impl():
    def rule(e: Import) -> bool:
        return e.target == "impl" and e.source != ""

    assert not _broken(EDGES, rule), "impl.py is the top: only __init__ imports it:\n  " + _broken(
        EDGES, rule
    )


def test_layout_depends_on_nothing():
    """layout.py names the on-disk paths for every layer, so it imports only the stdlib."""

    def rule(e: Import) -> bool:
        return e.source == "layout" and e.target not in ("__future__", "dataclasses", "os")

    assert not _broken(EDGES, rule), "layout.py imports:\n  " + _broken(EDGES, rule)


def test_the_cycle_finder_finds_and_prints_a_cycle():
    a_b, b_c, c_a = Import("a", "b", 1), Import("b", "c", 2), Import("c", "a", 3)
    graph = {"a": [a_b], "b": [b_c], "c": [c_a], "d": [Import("d", "a", 4)]}
    assert find_cycle(graph) == [a_b, b_c, c_a]
    assert find_cycles(graph) == [{"a": [a_b], "b": [b_c], "c": [c_a]}]
    assert _show(find_cycles(graph)).splitlines() == [
        "import cycle: a -> b -> c -> a",
        "  among a, b, c:",
        "  a:1 imports b",
        "  b:2 imports c",
        "  c:3 imports a",
    ]
    assert find_cycles({"a": [a_b], "b": [], "c": []}) == []


if __name__ == "__main__":
    for e in sorted(EDGES, key=lambda e: (e.source, e.target, e.line)):
        if e.target in MODULES:
            print(e)
    cycles = find_cycles(_internal(EDGES))
    print(_show(cycles) or "no import cycle")
    sys.exit(1 if cycles else 0)

"""The module-level import graph of src/lockcompare: each package's modules, and every import circle.

Reads the source (nothing is imported), so it sees every import form a module runs: ``import
lockcompare.x.y``, ``from lockcompare.x import y`` (a module ``y`` or a name in ``x``), ``from
lockcompare import X``, relative imports, and imports inside functions. What is imported only for
the type checker (under ``if TYPE_CHECKING:``) is not a dependency at run time and is left out.

    python scripts/import_graph.py            # packages, their modules, the circles (exit 1 if any)
    python scripts/import_graph.py --package runner

tests/test_layers.py builds its package graph with :func:`module_graph`.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "lockcompare"


def module_name(path: Path, *, source: Path = SOURCE) -> str:
    """``src/lockcompare/runner/matrix.py`` -> ``lockcompare.runner.matrix`` (a package: its __init__'s name)."""
    return ".".join(path.relative_to(source.parent).with_suffix("").parts).removesuffix(".__init__")


class _Imports(ast.NodeVisitor):
    """The absolute names a module's imports name (``from a import b`` gives ``a.b``: the module
    ``a.b``, or the name ``b`` of the module ``a``)."""

    def __init__(self, *, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.names: list[str] = []

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.names += [alias.name for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:  # relative: from the module's own package (a package's __init__ is its own)
            package = self.module.split(".") if self.is_package else self.module.split(".")[:-1]
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        self.names += [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names]


def module_graph(source: Path = SOURCE) -> dict[str, set[str]]:
    """Module -> the lockcompare modules it imports (a name that is not a module counts as its module)."""
    paths = {module_name(path, source=source): path for path in sorted(source.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found = _Imports(module=module, is_package=path.name == "__init__.py")
        found.visit(ast.parse(path.read_text(), filename=str(path)))
        targets = set()
        for name in found.names:
            target = name
            while target and target not in paths:  # ``from a.b import name``: the module is a.b
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def package_of(module: str) -> str:
    """``lockcompare.runner.matrix`` -> ``runner``; a top-level module is its own (``errors``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lockcompare"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", help="show only this package (e.g. runner); circles anywhere are still said")
    args = parser.parse_args(argv)
    graph = module_graph()
    by_package: dict[str, list[str]] = defaultdict(list)
    for module in graph:
        by_package[package_of(module)].append(module)
    if args.package and args.package not in by_package:
        print(f"import_graph: no package {args.package!r} (known: {', '.join(sorted(by_package))})", file=sys.stderr)
        return 2
    for package in sorted(by_package):
        if args.package and package != args.package:
            continue
        modules = sorted(by_package[package])
        print(f"{package} ({len(modules)} modules)")
        for module in modules:
            # Named within the package (``redis.client``, not ``client``: a package may hold subpackages).
            inside = sorted(
                t.removeprefix(f"lockcompare.{package}.")
                for t in graph[module]
                if package_of(t) == package and t != module
            )
            print(f"  {module.removeprefix('lockcompare.')}" + (f" -> {', '.join(inside)}" if inside else ""))
    found = cycles(graph)
    print(f"\n{len(found)} import circle(s) among {len(graph)} modules")
    for component in found:
        print("  circle: " + " <-> ".join(m.removeprefix("lockcompare.") for m in component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

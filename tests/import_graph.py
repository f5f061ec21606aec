"""Every import between the package's modules, function-level ones included, and the layer rule.

The package is layered; an import may point to its own layer or a lower one, never up, and the
graph may hold no cycle (an import deferred into a function still counts: a deferred import
that exists to dodge a cycle is a cycle). ``docs/architecture.md`` draws the layers.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: The layers, lowest first: module names relative to ``encoder_tasks`` (a name covers its
#: submodules; the longest name that matches a module decides its layer).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "errors", "log", "runtime", "devices", "metrics", "collators", "checkpoints", "outputs", "data",
            "inputs", "artifact", "settings", "testing", "adapters", "padding_free", "token_batches", "diagnosis",
            "reporting", "reporting.tracking", "reporting.model_card",
        ),
    ),
    (
        "model and engines",
        (
            "backbone", "heads", "config", "parsing", "training_args", "trainer", "sampling", "predict", "precision",
            "runtimes", "export", "quantization", "distillation", "reporting.plots", "encoder_layers",
            "time_budget", "weight_averaging", "early_stopping",
            "reporting.run_report",
        ),
    ),
    ("contract", ("task",)),
    ("tasks", ("tasks",)),
    ("registry", ("registry",)),
    (
        "application",
        (
            "", "saved", "inference", "run", "hpo", "cli", "recipes", "commands", "serving", "engines",
            "api", "distillation.run", "reporting.compare",
        ),
    ),
)  # fmt: skip

#: Modules that import by a name computed at run time, and why; the test fails on any other.
#: Each target lies in the module's own layer or below (the reason says how).
DYNAMIC_IMPORTS = {
    "encoder_tasks": "the public names, imported when first used: each names a module of the package",
    "encoder_tasks.backbone": "a pip package that carries a Hub model's weights (LOCAL_MIRRORS), outside the package",
    "encoder_tasks.cli": "the commands of TOOLS, all in the application layer",
    "encoder_tasks.export": "its own submodules (_LAZY), imported when first used",
    "encoder_tasks.heads": "the head class a saved model's encoder_tasks.json names; only an EncoderWithHead is accepted",
    "encoder_tasks.runtimes": "its own backend modules (RUNTIMES), imported when a backend is asked for",
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "encoder_tasks.heads"
    target: str  # imported module of the package
    path: Path
    line: int


def module_names(package: Path) -> dict[str, Path]:
    """``{"encoder_tasks.heads": path, ...}`` for every module and package under ``package``."""
    names = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


#: The target of an import whose module name is computed at run time.
DYNAMIC = "<computed at run time>"


def _is_import_module_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
    )


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports(package: Path) -> list[Import]:
    """Every import of a package module by a package module: top-level, inside functions, and
    ``importlib.import_module("literal")``."""
    modules = module_names(package)
    root = package.name
    found = []
    for source, path in modules.items():
        here = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # ``from . import x`` imports module ``x`` where one exists, else a name of ``.``.
                targets = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names
                ]
            elif _is_import_module_call(node):
                argument = node.args[0] if node.args else None
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    targets = [argument.value]
                else:
                    found.append(Import(source, DYNAMIC, path, node.lineno))
            for name in targets:
                if name == root or name.startswith(root + "."):
                    target = _resolve(name, modules)
                    if target and target != source:
                        found.append(Import(source, target, path, node.lineno))
    return found


def layer_of(module: str, root: str = "encoder_tasks") -> int | None:
    """The index in :data:`LAYERS` of ``module`` (``None``: no layer names it)."""
    relative = module[len(root) + 1 :] if module != root else ""
    best, best_len = None, -1
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            matches = relative == name or (name and relative.startswith(name + ".")) or name == relative == ""
            if matches and len(name) > best_len:
                best, best_len = index, len(name)
    return best


def upward_imports(package: Path) -> list[str]:
    """One line per import that points up the layers, naming the file and line."""
    problems = []
    for imp in imports(package):
        if imp.target == DYNAMIC:
            continue
        low, high = layer_of(imp.source, package.name), layer_of(imp.target, package.name)
        if low is not None and high is not None and high > low:
            problems.append(
                f"{imp.path.relative_to(package.parent)}:{imp.line}: {imp.source} ({LAYERS[low][0]}) "
                f"imports {imp.target} ({LAYERS[high][0]}), a layer above it"
            )
    return sorted(problems)


def dynamic_imports(package: Path) -> dict[str, list[str]]:
    """``{module: ["file:line", ...]}`` of every ``import_module`` call with a computed name."""
    found: dict[str, list[str]] = {}
    for imp in imports(package):
        if imp.target == DYNAMIC:
            found.setdefault(imp.source, []).append(f"{imp.path.relative_to(package.parent)}:{imp.line}")
    return found


def unplaced_modules(package: Path) -> list[str]:
    return sorted(m for m in module_names(package) if layer_of(m, package.name) is None)


def cycles(package: Path) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module."""
    edges: dict[str, set[str]] = {m: set() for m in module_names(package)}
    for imp in imports(package):
        if imp.target != DYNAMIC:
            edges[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def reach(package: Path, prefix: str) -> tuple[int, int]:
    """``(modules, lines)`` that a change in ``prefix`` (a module or package) can be affected by:
    everything it imports, directly or not, outside itself."""
    modules = module_names(package)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports(package):
        if imp.target != DYNAMIC:
            edges[imp.source].add(imp.target)
    start = {m for m in modules if m == prefix or m.startswith(prefix + ".")}
    seen, todo = set(start), list(start)
    while todo:
        for target in edges[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    outside = seen - start
    return len(outside), sum(len(modules[m].read_text(encoding="utf-8").splitlines()) for m in outside)


if __name__ == "__main__":  # python -m tests.import_graph encoder_tasks.tasks.ner encoder_tasks.heads
    import sys

    root = Path(__file__).resolve().parents[1] / "encoder_tasks"
    for problem in upward_imports(root) + [f"cycle: {c}" for c in cycles(root)]:
        print(problem)
    for name in sys.argv[1:]:
        count, lines = reach(root, name)
        print(f"{name}: reaches {count} modules, {lines:,} lines")

"""The shape of the tree, read from the source (AST), not from importing it.

Every product module (ops/, env/, bench/ but its experiments) is parsed and its
imports followed, lazy ones inside functions included:
  - the import graph has no cycle;
  - no module reaches a lower-case private name (``_x``) of another module;
  - ``ops`` imports only env's ground floor (paths, files, repo);
  - each package imports only its own floor and those below (FLOORS), so the
    graph drawn floor by floor has every arrow pointing down;
  - nothing in the product imports bench.experiments.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from env.paths import REPO_ROOT

PRODUCT = ("ops", "env", "bench")
EXPERIMENTS = "bench.experiments"
# Floors within a top package, lowest first: a module may import its own floor and those below.
# A module not named here is a floor of its own, matched by its longest listed prefix.
FLOORS = {
    "env": [
        ("env.paths", "env.files", "env.repo"),
        ("env.lock",),
        ("env.builder",),
        ("env.image", "env.lint", "env.tiers", "env.cli"),
    ],
    "bench": [
        ("bench.measure",),
        ("bench.plan",),
        ("bench.report",),
        ("bench.stats",),
        ("bench.rounds",),
        ("bench.processes",),
        ("bench.ab",),
        ("bench.gpu_check_ort",),
        ("bench.run", "bench.serve", "bench.gpu_check"),
        ("bench.experiments",),
    ],
}
# Top packages: ops sits on env's ground floor, bench on ops and all of env.
PACKAGE_ORDER = ("env", "ops", "bench")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported (a name imported from a module counts as that module unless it is one)
    names: tuple[str, ...]  # names taken from the target (``from target import names``)
    lazy: bool  # inside a function
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _product_files() -> dict[str, Path]:
    files = {}
    for package in PRODUCT:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            files[_module_name(path)] = path
    return files


FILES = _product_files()


def _is_package(name: str) -> bool:
    return name in FILES and FILES[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> tuple[list[Import], list[tuple[str, str, int]]]:
    """The module's imports, and its attribute reads ``alias._x`` of an imported module (alias target, name, line)."""
    tree = ast.parse(FILES[module].read_text(), filename=str(FILES[module]))
    found: list[Import] = []
    aliases: dict[str, str] = {}
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    lazy_lines = {id(n) for f in functions for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        lazy = id(node) in lazy_lines
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PRODUCT:
                    found.append(Import(module, alias.name, (), lazy, node.lineno))
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            if source.split(".")[0] not in PRODUCT:
                continue
            plain = tuple(a.name for a in node.names if f"{source}.{a.name}" not in FILES)
            if plain:
                found.append(Import(module, source, plain, lazy, node.lineno))
            for alias in node.names:
                if f"{source}.{alias.name}" in FILES:  # a module imported by name from its package
                    found.append(Import(module, f"{source}.{alias.name}", (), lazy, node.lineno))
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
    private_reads = [
        (aliases[node.value.id], node.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and _lower_private(node.attr)
    ]
    return found, private_reads


def _lower_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name[1:2].islower()


IMPORTS = {module: _imports(module) for module in FILES}


def _edges() -> dict[str, set[str]]:
    return {m: {i.target for i in found if i.target in FILES and i.target != m} for m, (found, _) in IMPORTS.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or one module importing itself."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def _floor(module: str) -> tuple[int, int]:
    top = module.split(".")[0]
    floors = FLOORS.get(top, [])
    best, level = "", len(floors)  # an unlisted module: above every listed floor of its package
    for i, names in enumerate(floors):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, level = name, i
    return PACKAGE_ORDER.index(top), level


def test_the_walk_sees_every_package_and_its_imports():
    # A walk that found nothing would pass every check below.
    assert {"ops", "env.paths", "bench.run", "bench.plan.jobs", "bench.stats.compare", "env.builder.steps"} <= set(
        FILES
    )
    edges = _edges()
    assert "bench.plan.jobs" in edges["bench.run"] and "bench.ab.driver" in edges["bench.run"]  # the lazy one too
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _lower_private("_unique_csv") and not _lower_private("_BUILD") and not _lower_private("__all__")


def test_no_import_cycle():
    assert _cycles(_edges()) == []


def test_no_module_reaches_another_modules_private_name():
    crossings = []
    for module, (found, reads) in IMPORTS.items():
        for imp in found:
            crossings += [f"{module}:{imp.line} {imp.target}.{n}" for n in imp.names if _lower_private(n)]
        crossings += [f"{module}:{line} {target}.{name}" for target, name, line in reads if target != module]
    assert crossings == []


def test_ops_imports_no_env_and_no_bench_module():
    # The installed wheel holds ops alone: env (the tooling, ground floor included) and bench are not in it.
    outside = []
    for module, (found, _) in IMPORTS.items():
        if not module.startswith("ops"):
            continue
        outside += [
            f"{module}:{imp.line} imports {imp.target}" for imp in found if imp.target.startswith(("env", "bench"))
        ]
    assert outside == []


def test_every_import_points_down_a_floor():
    upward = []
    for module, (found, _) in IMPORTS.items():
        if module.startswith(EXPERIMENTS):
            continue
        for imp in found:
            if imp.target not in FILES:
                continue
            if _floor(imp.target) > _floor(module):
                upward.append(f"{module}:{imp.line} imports {imp.target}")
    assert upward == []


def test_nothing_in_the_product_imports_the_experiments():
    users = [
        f"{module}:{imp.line}"
        for module, (found, _) in IMPORTS.items()
        if not module.startswith(EXPERIMENTS)
        for imp in found
        if imp.target == EXPERIMENTS or imp.target.startswith(EXPERIMENTS + ".")
    ]
    assert users == []


@pytest.mark.parametrize("package", ["env", "ops"])
def test_lower_packages_import_nothing_above_them(package):
    above = PACKAGE_ORDER[PACKAGE_ORDER.index(package) + 1 :]
    found = [
        f"{module}:{imp.line} imports {imp.target}"
        for module, (imports, _) in IMPORTS.items()
        if module.split(".")[0] == package
        for imp in imports
        if imp.target.split(".")[0] in above
    ]
    assert found == []


# --- single sources -----------------------------------------------------------------------------------------

GRID_MODULE = "bench/plan/grid.py"
TOLERANCE_HOMES = ("ops/reference.py", "tests/ops/test_reference")


def _python_files(*roots: str) -> list[Path]:
    files = [REPO_ROOT / "tasks.py"]
    for root in roots:
        files += sorted((REPO_ROOT / root).rglob("*.py"))
    return files


def _named_shapes() -> set[tuple[int, ...]]:
    from bench.plan import grid

    shapes = {v for v in vars(grid).values() if isinstance(v, tuple) and v and all(isinstance(d, int) for d in v)}
    shapes |= {s for v in vars(grid).values() if isinstance(v, tuple) for s in v if isinstance(s, tuple)}
    return {s for s in shapes if all(isinstance(d, int) for d in s)}


def _shape_literals(tree: ast.AST, shapes: set[tuple[int, ...]]) -> list[tuple[int, str]]:
    labels = {"x".join(map(str, s)) for s in shapes}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and node.elts and all(isinstance(e, ast.Constant) for e in node.elts):
            value = tuple(e.value for e in node.elts)
            if value in shapes:
                found.append((node.lineno, str(value)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in labels:
            found.append((node.lineno, node.value))
    return found


def test_no_named_shape_is_written_outside_the_grid_module():
    shapes = _named_shapes()
    assert (8, 128, 1024) in shapes and (16384, 8192) in shapes  # the scan knows the grid's shapes
    assert _shape_literals(ast.parse("a = (1, 8, 512)\nb = '8x128x1024'\nc = (2, 3)"), shapes) == [
        (1, "(1, 8, 512)"),
        (2, "8x128x1024"),
    ]
    found = []
    for path in _python_files("bench", "ops", "env"):
        if path.relative_to(REPO_ROOT).as_posix() == GRID_MODULE:
            continue
        found += [
            f"{path.relative_to(REPO_ROOT)}:{line} {text}"
            for line, text in _shape_literals(ast.parse(path.read_text()), shapes)
        ]
    assert found == []


def _tolerance_literals(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword)
        and node.arg in ("rtol", "atol")
        and isinstance(node.value, ast.Constant | ast.UnaryOp)
    ]


def test_no_rtol_or_atol_literal_outside_the_reference_tolerances():
    assert _tolerance_literals(ast.parse("f(x, rtol=1e-5, atol=0)\ng(**T.as_kwargs())")) == [1, 1]
    found = []
    for path in _python_files("bench", "ops", "env", "tests"):
        name = path.relative_to(REPO_ROOT).as_posix()
        if name.startswith(TOLERANCE_HOMES):
            continue
        found += [f"{name}:{line}" for line in _tolerance_literals(ast.parse(path.read_text()))]
    assert found == []


def _reports_defaults(tree: ast.AST) -> list[int]:
    """Lines that build <repo>/reports themselves, or read the reports variable, instead of env.paths.reports_dir."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant)
            and node.right.value == "reports"
            and "REPO_ROOT" in ast.unparse(node.left)
        ):
            found.append(node.lineno)
        elif isinstance(node, ast.Constant) and node.value == "FUSEDBENCH_REPORTS_DIR":
            found.append(node.lineno)
    return found


def test_the_reports_folder_has_one_default_that_honours_its_variable(monkeypatch, tmp_path):
    from env.paths import reports_dir

    monkeypatch.setenv("FUSEDBENCH_REPORTS_DIR", str(tmp_path))
    assert reports_dir() == tmp_path.resolve() and reports_dir("elsewhere") == Path("elsewhere").resolve()
    assert _reports_defaults(ast.parse("a = REPO_ROOT / 'reports'\nb = os.environ['FUSEDBENCH_REPORTS_DIR']")) == [1, 2]
    found = []
    for path in _python_files("bench", "ops", "env"):
        name = path.relative_to(REPO_ROOT).as_posix()
        if name == "env/paths.py":
            continue
        found += [f"{name}:{line}" for line in _reports_defaults(ast.parse(path.read_text()))]
    assert found == []

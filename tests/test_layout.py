"""The layout holds: layers import only downwards, no import cycle, one reader of the environment."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

PACKAGES = ("schemas", "billing", "pipelines")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = ast.parse(path.read_text())
    return out


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for the type checker only)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _imports(name: str, tree: ast.Module, known: set[str], top_level_only: bool) -> set[str]:
    nodes = tree.body if top_level_only else _runtime_nodes(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
    return {m for m in found if m != name}


def test_layers_import_only_downwards():
    modules = _modules()
    allowed = {"schemas": {"schemas"}, "billing": {"schemas", "billing"}, "pipelines": set(PACKAGES)}
    for name, tree in modules.items():
        for target in _imports(name, tree, set(modules), top_level_only=False):
            assert target.split(".")[0] in allowed[name.split(".")[0]], f"{name} imports {target}"


def test_only_settings_reads_the_environment():
    readers = []
    for package in (*PACKAGES, "airflow_dags"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if re.search(r"os\.environ|os\.getenv|getenv\(|envvar=", path.read_text()):
                readers.append(rel)
    # the fault hook reads its own two test-only variables
    assert sorted(readers) == ["pipelines/runtime/faults.py", "pipelines/settings.py"]


def test_no_module_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 400
    }
    assert long == {}


def test_pipelines_holds_only_stage_packages_and_the_three_entry_modules():
    loose = sorted(p.name for p in (ROOT / "pipelines").glob("*.py"))
    assert loose == ["__init__.py", "cli.py", "errors.py", "settings.py"]
    stages = sorted(p.name for p in (ROOT / "pipelines").iterdir() if (p / "__init__.py").exists())
    assert stages == [
        "adoption",
        "effectiveness",
        "ingest",
        "invoicing",
        "jobs",
        "lake",
        "notify",
        "quota",
        "runtime",
        "usage",
        "warehouse",
    ]


def test_no_function_over_60_lines_in_billing_or_a_beam_module():
    """The billing rules and the pipelines read as their steps."""
    paths = [*(ROOT / "billing").rglob("*.py")]
    paths += [
        p
        for p in (ROOT / "pipelines").rglob("*.py")
        if re.search(r"^(import|from) apache_beam", p.read_text(), re.MULTILINE)
    ]
    long = {
        f"{path.relative_to(ROOT)}:{node.name}": length
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > 60
    }
    assert long == {}


# Inside pipelines/, lowest first: a module imports only from its own layer and those below it. The
# core is what everything may use (errors, settings, dates, the fault hook, whole-file writes, logs,
# start-up tuning); the runtime that builds engines and Beam options sits above the lake and the
# warehouse; every package's ``commands`` module is a command-line edge, at the stages' layer.
PIPELINE_LAYERS = (
    (
        "pipelines.errors",
        "pipelines.settings",
        "pipelines.runtime.compat",
        "pipelines.runtime.dates",
        "pipelines.runtime.faults",
        "pipelines.runtime.files",
        "pipelines.runtime.logs",
        "pipelines.runtime.startup",
    ),
    ("pipelines.lake",),
    ("pipelines.warehouse",),
    ("pipelines.runtime",),
    (  # the stages, and each package's commands
        "pipelines.ingest",
        "pipelines.usage",
        "pipelines.quota",
        "pipelines.notify",
        "pipelines.effectiveness",
        "pipelines.invoicing",
        "pipelines.adoption",
        "pipelines.warehouse.commands",
    ),
    ("pipelines.jobs",),
    ("pipelines.cli",),
)


def _layer(module: str) -> int:
    """The layer of ``module``: of its longest matching prefix."""
    best, level = "", 0
    for at, names in enumerate(PIPELINE_LAYERS):
        for name in names:
            if (module == name or module.startswith(f"{name}.")) and len(name) > len(best):
                best, level = name, at
    assert best or module == "pipelines", module
    return level


def test_layers_inside_pipelines_import_only_downwards():
    """runtime, lake and warehouse below the stages, the stages below jobs, jobs below the command
    line; an import inside a function counts too."""
    modules = _modules()
    wrong = sorted(
        f"{name} imports {target}"
        for name, tree in modules.items()
        if name.startswith("pipelines")
        for target in _imports(name, tree, set(modules), top_level_only=False)
        if target.startswith("pipelines") and _layer(target) > _layer(name)
    )
    assert wrong == [], "\n".join(wrong)


def test_no_import_cycle_counting_imports_inside_functions():
    """No module reaches itself through its imports, those inside functions included (a deferred
    import hides an edge from Python, not from the design)."""
    modules = _modules()
    graph = {n: _imports(n, t, set(modules), top_level_only=False) & set(modules) for n, t in modules.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


# An import inside a function is only for a heavy dependency that the importing module would otherwise
# load for every command that touches it, and says which: ``# lazy: apache_beam``.
HEAVY = {
    *("apache_beam", "boto3", "botocore", "dask", "distributed"),
    *("great_expectations", "pandas", "psycopg", "weasyprint"),
    "pydantic",  # the catalog's models: not while Airflow parses the DAG files
}
# What a library module loads besides its own package (the optional extras behind it).
LIBRARY_LOADS = {
    "apache_beam.io.aws": {"boto3", "botocore"},
    "apache_beam.runners.dask": {"dask", "distributed"},
}


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The statements Python runs when it imports the module: not function bodies, not TYPE_CHECKING."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _loaded_at_import(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """For each module, every top-level package Python loads when it is imported (its module-level
    imports, the packages' ``__init__`` on the way, and theirs, transitively)."""

    def direct(name: str) -> set[str]:
        found: set[str] = set()
        parts = name.split(".")
        found |= {".".join(parts[:i]) for i in range(1, len(parts))}  # the packages holding it
        for node in _module_level(modules[name]):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [m for m in subs if m in modules] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                bits = target.split(".")
                found |= {".".join(bits[:i]) for i in range(1, len(bits) + 1)}
        return {m for m in found if m in modules or m.split(".")[0] not in PACKAGES}

    edges = {name: direct(name) for name in modules}
    out: dict[str, set[str]] = {}
    for name in modules:
        seen, todo = set(), [name]
        while todo:
            for nxt in edges.get(todo.pop(), set()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        out[name] = {m.split(".")[0] for m in seen}
    return out


def test_imports_inside_functions_only_defer_a_heavy_dependency_and_say_which():
    modules = _modules()
    loaded = _loaded_at_import(modules)
    wrong = []
    for name, tree in modules.items():
        path = ROOT / name.replace(".", "/")
        source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text().splitlines()
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in _runtime_nodes(function):
                if not isinstance(node, ast.Import | ast.ImportFrom) or node is function:
                    continue
                target = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                said = re.search(r"# lazy: (\w+)", source[node.lineno - 1])
                where = f"{name}:{node.lineno} imports {target}"
                if not said or said.group(1) not in HEAVY:
                    wrong.append(f"{where} inside a function without '# lazy: <heavy dependency>'")
                    continue
                heavy = said.group(1)
                module = next((m for m in (f"{target}.{a.name}" for a in node.names) if m in modules), target)
                if module in modules:
                    reaches = loaded[module] | {module.split(".")[0]}
                else:
                    reaches = {target.split(".")[0]}.union(
                        *(v for k, v in LIBRARY_LOADS.items() if target == k or target.startswith(f"{k}."))
                    )
                if heavy not in reaches:
                    wrong.append(f"{where}: it does not load {heavy}")
                elif heavy in loaded[name]:
                    wrong.append(f"{where}: {name} loads {heavy} anyway, import it at the top")
    assert wrong == [], "\n".join(wrong)

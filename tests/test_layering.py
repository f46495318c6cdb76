"""The parts of ``slangcli`` and their import order, read from the source with ``ast`` (nothing is imported).

``docs/ARCHITECTURE.md`` draws the parts (:data:`PARTS`) and their arrows; here they are enforced. From the bottom
up: the leaves (errors, the option declarations, random streams, passes in blocks, the process's start and
threads, the package's version); the model; Gaussian posteriors; data in; run files; the predictive; the
methods; a fit; k-tied compression; figures; sweeps and the cluster they run on; the Python API; the estimators;
the command line on top. A module may import from its own part or from a part below, never from one above; every
module lies in exactly one part (a new module must be placed); nothing but the command line speaks click or
rich; and within a part, the finer :data:`RULES` hold.

The modules' imports also form no cycle, lazy imports (inside a function) included: a cycle makes what a module
finds on import depend on which module was imported first. Imports under ``if TYPE_CHECKING:`` never run and are
not counted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "slangcli"
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"

# The parts from the bottom up: (name, the modules in it by prefix, "=name" for that module alone). A module lies in
# the part of its longest matching prefix.
PARTS = [
    ("leaves", ("=slangcli", "slangcli.errors", "slangcli.declare", "slangcli.streams", "slangcli.blocks",
                "slangcli._startup", "slangcli.threads")),
    ("model", ("slangcli.models",)),
    ("gaussian", ("slangcli.gaussian",)),
    ("data", ("slangcli.data",)),
    ("runfile", ("slangcli.runfile",)),
    ("predictive", ("slangcli.predictive",)),
    ("methods", ("slangcli.methods",)),
    ("training", ("slangcli.training",)),
    ("compress", ("slangcli.compress",)),
    ("plot", ("slangcli.plot",)),
    ("sweep", ("slangcli.sweep", "slangcli.cluster", "slangcli.cluster_worker")),
    ("api", ("slangcli.api",)),
    ("estimators", ("slangcli.estimators",)),
    ("cli", ("slangcli.cli", "slangcli.__main__")),
]
COMMAND_LINE = ("slangcli.cli", "slangcli.__main__")
# the parts of a fit above its loop: its options, plan, checkpoints, restarts and the fit itself
FIT = ("slangcli.training.options", "slangcli.training.plan", "slangcli.training.checkpoints",
       "slangcli.training.restarts", "slangcli.training.fitting")
# Finer rules within the parts' order: (modules the rule applies to, imports they may not make, why[, modules under
# the first it does not apply to]). A name matches a prefix when it equals it or lies under it.
RULES = [
    (("slangcli",), ("click", "rich"), "only the command line (slangcli.cli) imports click or rich"),
    (("slangcli.streams",), ("slangcli",), "streams is a leaf: every layer draws from it"),
    (("slangcli.data.readers", "slangcli.data.prepare", "slangcli.data.schema"),
     ("slangcli.models", "slangcli.gaussian", "slangcli.runfile"), "reading and preparing data needs no model"),
    (("slangcli.methods",), ("slangcli.predictive.tables", "slangcli.predictive.evaluation"),
     "a method computes a posterior; scoring it and writing predictions are above it"),
    (("slangcli.training.loop", "slangcli.training.tuning", "slangcli.training.learned"), FIT,
     "the loop, tuning and the learned precisions are driven by the fit and never reach up to it"),
    (("slangcli.training.plan",), FIT[2:], "a fit's plan sits below the checkpoints and restarts that train from it"),
    (("slangcli.training.checkpoints", "slangcli.training.restarts"), ("slangcli.training.fitting",),
     "checkpoints and restarts are used by the fit and never reach up to it"),
    (("slangcli.cluster", "slangcli.cluster_worker"), ("slangcli.sweep", "slangcli.training"),
     "the cluster runs any task: it knows neither sweeps nor fits"),
]


def _under(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def module_name(path, root):
    """``slangcli.methods.slang`` for ``root/methods/slang.py``; a package's ``__init__`` is the package."""
    parts = (root.name,) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path, module, *, lazy=False):
    """``(line, imported name)`` of every import statement in ``path``, wherever it sits (functions included);
    with ``lazy``, ``(line, imported name, inside a function)``.

    ``from M import a`` gives ``M.a`` (a submodule or a name defined in M; both lie under M); relative imports are
    resolved against ``module``'s package.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    in_function = {id(inner) for node in ast.walk(tree)
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                   for inner in ast.walk(node)}
    type_checking = {id(inner) for node in ast.walk(tree)
                     if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
                     for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            if source == "__future__":
                continue
            names = [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        if id(node) in type_checking:
            continue
        found.extend((node.lineno, name, id(node) in in_function) if lazy else (node.lineno, name) for name in names)
    return found


def part_of(module, parts=PARTS) -> int | None:
    """The index in ``parts`` of the part ``module`` lies in (its longest matching prefix), or None."""
    best = None
    for index, (_, prefixes) in enumerate(parts):
        for prefix in prefixes:
            hit = module == prefix[1:] if prefix.startswith("=") else _under(module, prefix)
            if hit and (best is None or len(prefix.lstrip("=")) > best[1]):
                best = (index, len(prefix.lstrip("=")))
    return None if best is None else best[0]


def violations(root, rules=RULES, parts=PARTS):
    """One line per forbidden import under the package folder ``root``: module, imported name, line, why."""
    out = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        for line, name in imports_of(path, module):
            where = f"({path.relative_to(root.parent)}:{line})"
            own, theirs = part_of(module, parts), part_of(name, parts)
            if own is not None and theirs is not None and theirs > own:
                out.append(f"{module} imports {name} {where}: the {parts[own][0]} part sits below the "
                           f"{parts[theirs][0]} part")
            for rule in rules:
                applies, forbidden, why = rule[:3]
                besides = rule[3] if len(rule) > 3 else ()
                if not any(_under(module, a) for a in applies) or any(_under(module, b) for b in besides):
                    continue
                if any(_under(module, c) for c in COMMAND_LINE) and forbidden == ("click", "rich"):
                    continue
                if any(_under(name, f) for f in forbidden):
                    out.append(f"{module} imports {name} {where}: {why}")
    return out


def import_graph(root):
    """``{module: {imported module: (line, lazy)}}`` over the modules of the package folder ``root``.

    An imported name is the module it lies in (``slangcli.runfile.io.Run`` is ``slangcli.runfile.io``). A module's own
    packages are left out: Python initialises them before the module whatever it imports (``from slangcli import
    __version__`` in ``slangcli.runfile.io``). Of several imports of one module the module-level one is kept.
    """
    paths = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph = {}
    for module, path in paths.items():
        edges = graph.setdefault(module, {})
        for line, name, lazy in imports_of(path, module, lazy=True):
            parts = name.split(".")
            target = next((m for m in (".".join(parts[:k]) for k in range(len(parts), 0, -1)) if m in paths), None)
            if target is None or target == module or _under(module, target):
                continue
            if target not in edges or (edges[target][1] and not lazy):
                edges[target] = (line, lazy)
    return graph


def cycles(graph, allowed=frozenset()):
    """One line per import cycle of ``graph`` (``a -> b -> a``), leaving out the lazy imports of ``allowed``."""
    edges = {m: sorted(t for t, (_, lazy) in out.items() if not (lazy and (m, t) in allowed))
             for m, out in graph.items()}
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(module, path):
        state[module] = 1
        path.append(module)
        for target in edges.get(module, ()):
            if state.get(target) == 1:
                loop = path[path.index(target):] + [target]
                found.append(" -> ".join(loop) + "".join(f" ({a} -> {b} is lazy, line {graph[a][b][0]})"
                                                         for a, b in zip(loop, loop[1:]) if graph[a][b][1]))
            elif target not in state:
                visit(target, path)
        path.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    return found


def test_no_module_reaches_up():
    found = violations(PACKAGE)
    assert not found, "layering broken:\n" + "\n".join(found)


def test_the_import_graph_has_no_cycle():
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles:\n" + "\n".join(found)


def test_every_module_lies_in_a_part():
    """A module that no part names (a new top-level module, a new package) fails here until it is placed."""
    unplaced = sorted(m for m in (module_name(p, PACKAGE) for p in PACKAGE.rglob("*.py")) if part_of(m) is None)
    assert not unplaced, f"modules in no part of PARTS: {unplaced}"


def test_the_architecture_document_draws_the_parts_in_their_order():
    """docs/ARCHITECTURE.md's diagram names the parts bottom-up as PARTS has them (its lines ``[part]``)."""
    drawn = re.findall(r"\[([a-z]+)\]", ARCHITECTURE.read_text().split("```")[1])
    assert list(reversed(drawn)) == [name for name, _ in PARTS]


def test_the_check_fails_on_an_upward_import(tmp_path):
    """A package with one import of each forbidden kind is reported module by module, with the import named."""
    root = tmp_path / "slangcli"
    files = {
        "__init__.py": "",
        "streams.py": "import numpy as np\nfrom slangcli.errors import DataError\n",
        "models.py": "def f():\n    import click\n",
        "methods/__init__.py": "",
        "methods/good.py": "from slangcli import streams\nfrom slangcli.methods import base\n",
        "methods/bad.py": "from ..training import loop\n",
        "training/__init__.py": "",
        "training/loop.py": "from slangcli import streams\n",
        "training/learned.py": "def f():\n    from slangcli.training.fitting import fit\n",
        "runfile/__init__.py": "",
        "runfile/io.py": "from slangcli.training.fitting import fit\n",
        "api.py": "from slangcli import estimators\nfrom slangcli.cli import main\n",
        "data/__init__.py": "",
        "data/readers.py": "from slangcli.data.prepare import Table\nfrom rich.console import Console\n",
        "data/prepare.py": "from slangcli.models import MLP\n",
        "cli/__init__.py": "import click\nimport rich\nfrom slangcli.training import loop\n",
        "cluster.py": "from slangcli.sweep import grid\n",
        "sweep/__init__.py": "",
        "sweep/grid.py": "from slangcli.cluster import connect\nfrom slangcli.sweep import tasks\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = violations(root)
    assert [line.split(" (")[0] for line in found] == [
        "slangcli.api imports slangcli.estimators",
        "slangcli.api imports slangcli.cli.main",
        "slangcli.cluster imports slangcli.sweep.grid",
        "slangcli.data.prepare imports slangcli.models.MLP",
        "slangcli.data.readers imports rich.console.Console",
        "slangcli.methods.bad imports slangcli.training.loop",
        "slangcli.models imports click",
        "slangcli.runfile.io imports slangcli.training.fitting.fit",
        "slangcli.streams imports slangcli.errors.DataError",
        "slangcli.training.learned imports slangcli.training.fitting.fit",
    ], found
    assert "slangcli/methods/bad.py:1" in found[5] and "the methods part sits below the training part" in found[5]
    assert "the model part sits below" not in found[3] and "reading and preparing data needs no model" in found[3]


def test_the_check_finds_import_cycles(tmp_path):
    """A module-level cycle is found; a cycle closed by a lazy import is found unless the import is allowed; an
    import of a module's own package and a lazy import that closes no cycle are not cycles."""
    root = tmp_path / "slangcli"
    files = {
        "__init__.py": "from slangcli.a import f\n",
        "a.py": "from slangcli import b\nfrom slangcli import __version__\n",
        "b.py": "import slangcli.c\n",
        "c.py": "from slangcli.a import f\n",
        "d.py": "from slangcli import e\n",
        "e.py": "def g():\n    from slangcli.d import h\n    from slangcli import a\n",
    }
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    graph = import_graph(root)
    assert "slangcli" not in graph["slangcli.a"]
    assert cycles(graph) == [
        "slangcli.a -> slangcli.b -> slangcli.c -> slangcli.a",
        "slangcli.d -> slangcli.e -> slangcli.d (slangcli.e -> slangcli.d is lazy, line 2)",
    ]
    assert cycles(graph, {("slangcli.e", "slangcli.d")}) == ["slangcli.a -> slangcli.b -> slangcli.c -> slangcli.a"]

"""The import layering of ``slangcli``, read from the source with ``ast`` (nothing is imported).

From the bottom up: ``streams`` (random streams, a leaf); the numerics (readers, data preparation and schema, models,
low-rank algebra, posteriors, prediction, metrics, compression) and the run files (``io``); the step methods; the
training loop, tuning and learned precisions; the fit's setup, checkpoints and restarts; fitting, evaluation and
the workflow; the Python API and the estimators; sweeps of fits (``slangcli.sweep``) and the Dask cluster they and
``slang fit --scheduler`` run on (``slangcli.cluster``); the command line (``slangcli.cli``) on top. A module may
import from its own layer or below, never from above, and nothing but the command line speaks click or rich.

The modules' imports also form no cycle: a cycle makes what a module finds on import depend on which module was
imported first. Only the lazy imports (inside a function) of :data:`LAZY_CYCLES` may close one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "slangcli"

# Rules: (modules the rule applies to, imports they may not make, why). A name matches a prefix when it equals
# it or lies under it (``slangcli.methods`` covers ``slangcli.methods.slang`` and ``slangcli.methods.base.Problem``).
# ``__main__`` is the entry point of ``python -m slangcli``: it only starts the command line.
COMMAND_LINE = ("slangcli.cli", "slangcli.__main__")
# the layers above the training loop: the fit's setup, checkpoints and restarts, fitting, evaluation, compression
# of runs, the workflow, the API and the estimators
WORKFLOW = ("slangcli.options", "slangcli.fitsetup", "slangcli.checkpoints", "slangcli.restarts", "slangcli.fitting",
           "slangcli.evaluation", "slangcli.compression", "slangcli.workflow", "slangcli.api", "slangcli.estimators")
# the layer above the workflow: sweeps of fits, and the Dask cluster that runs their tasks (and the candidate fits
# and restarts of slang fit --scheduler); engine modules, free of click, that the command line drives
SWEEP = ("slangcli.sweep", "slangcli.cluster", "slangcli.cluster_worker")
# Each rule may name, fourth, modules it does not apply to although they lie under the first.
RULES = [
    (("slangcli",), ("click", "rich"), "only the command line (slangcli.cli) imports click or rich"),
    (("slangcli",), ("slangcli.cli",), "only the command line itself imports the cli package"),
    (("slangcli.methods",), ("slangcli.train", "slangcli.tuning", "slangcli.learned", "slangcli.workflow",
                             "slangcli.api", "slangcli.tables", *WORKFLOW),
     "a method is driven by the loop, tuning and the workflow, and never reaches up to them"),
    (("slangcli.streams",), ("slangcli",), "streams is a leaf: every layer draws from it"),
    (("slangcli.readers", "slangcli.prepare", "slangcli.schema", "slangcli.lowrank", "slangcli.models",
      "slangcli.posteriors", "slangcli.noise", "slangcli.quadrature", "slangcli.divergence", "slangcli.mixture",
      "slangcli.metrics", "slangcli.predict", "slangcli.compress"),
     ("slangcli.methods", "slangcli.train", "slangcli.tuning", "slangcli.learned", *WORKFLOW),
     "the numerics sit below the methods and the loop"),
    (("slangcli.readers", "slangcli.prepare", "slangcli.schema"),
     ("slangcli.models", "slangcli.lowrank", "slangcli.posteriors", "slangcli.io", "slangcli.tables"),
     "reading and preparing data needs no model"),
    (("slangcli.io",), ("slangcli.methods", "slangcli.train", "slangcli.tuning", "slangcli.learned", *WORKFLOW),
     "run files hold posteriors and models; fitting writes them, they never reach up to the fit"),
    (("slangcli.train", "slangcli.tuning", "slangcli.learned"), WORKFLOW,
     "the loop, tuning and the learned precisions are driven by fitting and never reach up to it"),
    (("slangcli.fitsetup",), ("slangcli.checkpoints", "slangcli.restarts", "slangcli.fitting",
                              "slangcli.workflow", "slangcli.api", "slangcli.estimators"),
     "a fit's setup sits below the checkpoints and restarts that train from it"),
    (("slangcli.checkpoints", "slangcli.restarts"), ("slangcli.fitting", "slangcli.workflow", "slangcli.api",
                                                     "slangcli.estimators"),
     "checkpoints and restarts are used by fitting and never reach up to it"),
    (("slangcli.api",), ("slangcli.estimators",), "the estimators are built on the API, not the API on them"),
    (("slangcli",), SWEEP, "sweeps and the cluster drive fits from above (a fit gets a cluster's map as a callback)",
     SWEEP),
    (("slangcli.cluster", "slangcli.cluster_worker"), ("slangcli.sweep", *WORKFLOW),
     "the cluster runs any task: it knows neither sweeps nor fits"),
]

# Lazy imports (inside a function) that close an import cycle on purpose, as (importer, imported): every other
# import, module-level or lazy, must leave the module graph acyclic.
LAZY_CYCLES = {
    # slang's `stacked` hook returns the module that trains several SLANG fits of one network at once (--tune's
    # candidates), which builds on slang's own Hyper, State, init and step: importing slang does not load it
    ("slangcli.methods.slang", "slangcli.methods.slang_stacked"),
}


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
        found.extend((node.lineno, name, id(node) in in_function) if lazy else (node.lineno, name) for name in names)
    return found


def violations(root, rules=RULES, exempt=COMMAND_LINE):
    """One line per forbidden import under the package folder ``root``: module, imported name, line, rule."""
    out = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        if any(_under(module, e) for e in exempt):
            continue
        for line, name in imports_of(path, module):
            for rule in rules:
                applies, forbidden, why = rule[:3]
                besides = rule[3] if len(rule) > 3 else ()
                if not any(_under(module, a) for a in applies) or any(_under(module, b) for b in besides):
                    continue
                if any(_under(name, f) for f in forbidden):
                    out.append(f"{module} imports {name} ({path.relative_to(root.parent)}:{line}): {why}")
    return out


def import_graph(root):
    """``{module: {imported module: (line, lazy)}}`` over the modules of the package folder ``root``.

    An imported name is the module it lies in (``slangcli.io.Run`` is ``slangcli.io``). A module's own packages
    are left out: Python initialises them before the module whatever it imports (``from slangcli import
    __version__`` in ``slangcli.io``). Of several imports of one module the module-level one is kept.
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
    found = cycles(import_graph(PACKAGE), LAZY_CYCLES)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_every_allowed_cycle_is_a_lazy_import_that_closes_one():
    """The allow-list does not outlive its imports: each entry is an import inside a function, and without the
    allowance its cycle is found."""
    graph = import_graph(PACKAGE)
    for importer, imported in LAZY_CYCLES:
        assert graph.get(importer, {}).get(imported, (0, False))[1], f"{importer} no longer imports {imported} lazily"
        assert any(importer in c and imported in c for c in cycles(graph, LAZY_CYCLES - {(importer, imported)})), \
            f"{importer} -> {imported} closes no cycle: drop it from LAZY_CYCLES"


def test_the_rules_cover_every_engine_module():
    """Every module outside the command line falls under the rule that keeps click and rich out of it."""
    modules = {module_name(p, PACKAGE) for p in PACKAGE.rglob("*.py")}
    engine = {m for m in modules if not any(_under(m, e) for e in COMMAND_LINE)}
    assert {"slangcli.streams", "slangcli.readers", "slangcli.prepare", "slangcli.train",
            "slangcli.methods.slang_stacked", "slangcli.sweep.grid", "slangcli.sweep.tasks", "slangcli.sweep.results",
            "slangcli.sweep.driver", "slangcli.cluster", "slangcli.cluster_worker"} <= engine
    assert "slangcli.data" not in modules


def test_the_check_fails_on_an_upward_import(tmp_path):
    """A package with one import of each forbidden kind is reported module by module, with the import named."""
    root = tmp_path / "slangcli"
    files = {
        "__init__.py": "",
        "streams.py": "import numpy as np\nfrom slangcli.errors import DataError\n",
        "train.py": "from slangcli import streams\n",
        "models.py": "def f():\n    import click\n",
        "methods/__init__.py": "",
        "methods/good.py": "from slangcli import streams\nfrom slangcli.methods import base\n",
        "methods/bad.py": "from .. import train\n",
        "learned.py": "def f():\n    from slangcli.fitting import fit\n",
        "io.py": "from slangcli.fitting import fit\n",
        "api.py": "from slangcli import estimators\nfrom slangcli.cli import main\n",
        "readers/__init__.py": "from slangcli.readers._common import Table\nfrom rich.console import Console\n",
        "readers/_common.py": "",
        "cli/__init__.py": "import click\nimport rich\nfrom slangcli import train\n",
        "sweep/__init__.py": "",
        "sweep/grid.py": ("from slangcli import fitting\nfrom slangcli.cluster import connect\n"
                          "from slangcli.sweep import tasks\n"),
        "cluster.py": "from slangcli.sweep import grid\n",
        "tuning.py": "def f():\n    from slangcli.sweep.grid import points_of\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = violations(root)
    assert [line.split(" (")[0] for line in found] == [
        "slangcli.api imports slangcli.estimators",
        "slangcli.api imports slangcli.cli.main",
        "slangcli.cluster imports slangcli.sweep.grid",
        "slangcli.io imports slangcli.fitting.fit",
        "slangcli.learned imports slangcli.fitting.fit",
        "slangcli.methods.bad imports slangcli.train",
        "slangcli.models imports click",
        "slangcli.readers imports rich.console.Console",
        "slangcli.streams imports slangcli.errors.DataError",
        "slangcli.tuning imports slangcli.sweep.grid.points_of",
    ], found
    assert "slangcli/methods/bad.py:1" in found[5]


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

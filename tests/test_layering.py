"""The import layering of ``slangcli``, read from the source with ``ast`` (nothing is imported).

From the bottom up: ``streams`` (random streams, a leaf); the numerics (readers, data preparation, models,
low-rank algebra, posteriors, prediction, metrics, compression); the step methods; the training loop, tuning and
the workflow; the command line (``slangcli.cli``) on top. A module may import from its own layer or below,
never from above, and nothing but the command line speaks click or rich.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "slangcli"

# Rules: (modules the rule applies to, imports they may not make, why). A name matches a prefix when it equals
# it or lies under it (``slangcli.methods`` covers ``slangcli.methods.slang`` and ``slangcli.methods.base.Problem``).
COMMAND_LINE = ("slangcli.cli", "slangcli.__main__")
RULES = [
    (("slangcli",), ("slangcli.cli", "click", "rich"),
     "only the command line (slangcli.cli) imports click, rich or the cli package"),
    (("slangcli.methods",), ("slangcli.train", "slangcli.tuning", "slangcli.workflow", "slangcli.api",
                             "slangcli.tables"),
     "a method is driven by the loop, tuning and the workflow, and never reaches up to them"),
    (("slangcli.streams",), ("slangcli",), "streams is a leaf: every layer draws from it"),
    (("slangcli.readers", "slangcli.prepare", "slangcli.lowrank", "slangcli.models", "slangcli.posteriors",
      "slangcli.noise", "slangcli.quadrature", "slangcli.divergence", "slangcli.mixture", "slangcli.metrics",
      "slangcli.predict", "slangcli.compress"),
     ("slangcli.methods", "slangcli.train", "slangcli.tuning", "slangcli.workflow", "slangcli.api"),
     "the numerics sit below the methods and the loop"),
    (("slangcli.readers", "slangcli.prepare"),
     ("slangcli.models", "slangcli.lowrank", "slangcli.posteriors", "slangcli.io", "slangcli.tables"),
     "reading and preparing data needs no model"),
]


def _under(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def module_name(path, root):
    """``slangcli.methods.slang`` for ``root/methods/slang.py``; a package's ``__init__`` is the package."""
    parts = (root.name,) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path, module):
    """``(line, imported name)`` of every import statement in ``path``, wherever it sits (functions included).

    ``from M import a`` gives ``M.a`` (a submodule or a name defined in M; both lie under M); relative imports are
    resolved against ``module``'s package.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            if source == "__future__":
                continue
            found.extend((node.lineno, f"{source}.{alias.name}") for alias in node.names)
    return found


def violations(root, rules=RULES, exempt=COMMAND_LINE):
    """One line per forbidden import under the package folder ``root``: module, imported name, line, rule."""
    out = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        if any(_under(module, e) for e in exempt):
            continue
        for line, name in imports_of(path, module):
            for applies, forbidden, why in rules:
                if not any(_under(module, a) for a in applies):
                    continue
                if any(_under(name, f) for f in forbidden):
                    out.append(f"{module} imports {name} ({path.relative_to(root.parent)}:{line}): {why}")
    return out


def test_no_module_reaches_up():
    found = violations(PACKAGE)
    assert not found, "layering broken:\n" + "\n".join(found)


def test_the_rules_cover_every_engine_module():
    """Every module outside the command line falls under the rule that keeps click and rich out of it."""
    modules = {module_name(p, PACKAGE) for p in PACKAGE.rglob("*.py")}
    engine = {m for m in modules if not any(_under(m, e) for e in COMMAND_LINE)}
    assert {"slangcli.streams", "slangcli.readers", "slangcli.prepare", "slangcli.train",
            "slangcli.methods.slang_stacked"} <= engine
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
        "readers/__init__.py": "from slangcli.readers._common import Table\nfrom rich.console import Console\n",
        "readers/_common.py": "",
        "cli/__init__.py": "import click\nimport rich\nfrom slangcli import train\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = violations(root)
    assert [line.split(" (")[0] for line in found] == [
        "slangcli.methods.bad imports slangcli.train",
        "slangcli.models imports click",
        "slangcli.readers imports rich.console.Console",
        "slangcli.streams imports slangcli.errors.DataError",
    ], found
    assert "slangcli/methods/bad.py:1" in found[0]

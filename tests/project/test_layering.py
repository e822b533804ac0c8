"""The house rules, read from the source: one-way imports, confined dependencies, no meta writes.

- the import graph of ``aliasing``, ``rewrite`` and ``tools`` modules has no cycle (imports
  inside functions count; ``if TYPE_CHECKING:`` blocks do not, they never run), and
  none either when the ``if TYPE_CHECKING:`` imports are counted (types a module
  needs from a module that imports it live below both, as protocols);
- ``aliasing`` never imports ``rewrite``, and each ``aliasing`` module imports only
  modules of the layers above its own (the layers are listed in the package
  docstring of ``aliasing``);
- the library (``aliasing``, ``rewrite``: what the wheel ships) never imports the
  maintainer tools (``tools``, outside the wheel), not even under ``if TYPE_CHECKING:``
  nor by name through ``importlib.import_module``;
- only the adapters import ``torch._inductor`` (``rewrite/inductor/passes.py``), ``vllm``
  (``rewrite/vllm.py``) or ``sglang`` (``rewrite/sglang.py``);
- no module writes ``node.meta``;
- a library module's private names (one leading underscore) stay in it: no library
  module imports another module's private name, neither ``from m import _name`` nor
  ``m._name`` on an imported module (``import m``, ``from package import m``);
- no function or method of the library has a body longer than 60 lines (from its
  first statement after the docstring to its last line);
- Hypothesis is a test dependency only: the library, its command line and the
  equivalence oracle import and run without it (checked in a subprocess where
  ``import hypothesis`` fails).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx
import pytest

import aliasing

ROOT = Path(__file__).resolve().parents[2]
#: The library: the packages the wheel ships.
LIBRARY = ("aliasing", "rewrite")
#: Every package whose modules the rules read: the library and the maintainer tools.
PACKAGES = (*LIBRARY, "tools")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module ``from ... import`` reads in package ``package`` (relative imports resolved)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def _package_of(path: Path, module: str) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _runtime_imports(path: Path, module: str, *, type_checking: bool = False) -> set[str]:
    """Absolute names of every module ``path`` imports at run time (relative imports resolved).

    With ``type_checking`` the imports of ``if TYPE_CHECKING:`` blocks count too.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _package_of(path, module)
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph(*, type_checking: bool = False) -> nx.DiGraph:
    sources = _sources()
    g = nx.DiGraph()
    for module, path in sources.items():
        g.add_node(module)
        for imported in _runtime_imports(path, module, type_checking=type_checking):
            # "from aliasing import analyze" names the package; the package __init__ is the edge.
            target = imported
            while target and target not in sources:
                target = target.rpartition(".")[0]
            if target and target != module and not module.startswith(target + "."):
                g.add_edge(module, target)
    return g


def test_no_import_cycles() -> None:
    cycles = list(nx.simple_cycles(_graph()))
    assert cycles == [], f"import cycles: {cycles}"


def test_no_import_cycles_through_type_checking_imports() -> None:
    cycles = list(nx.simple_cycles(_graph(type_checking=True)))
    assert cycles == [], f"import cycles (counting if TYPE_CHECKING: imports): {cycles}"


def test_aliasing_never_imports_rewrite() -> None:
    g = _graph()
    bad = [(a, b) for a, b in g.edges if a.startswith("aliasing") and b.startswith("rewrite")]
    assert bad == []


def _imports_of_tools(sources: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, what it imports of ``tools``) for each import of the tools by one of ``sources``:
    ``import``/``from`` statements anywhere (``if TYPE_CHECKING:`` blocks and function bodies too)
    and ``importlib.import_module``/``__import__`` calls with a constant name."""
    found: set[tuple[str, str]] = set()
    for module, path in sources.items():
        names = set(_runtime_imports(path, module, type_checking=True))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and (
                    (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                    or (isinstance(node.func, ast.Name) and node.func.id in {"import_module", "__import__"})
                )
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
        found.update((module, name) for name in names if name == "tools" or name.startswith("tools."))
    return sorted(found)


def test_library_never_imports_tools() -> None:
    library = {m: p for m, p in _sources().items() if m.split(".")[0] in LIBRARY}
    assert {m.split(".")[0] for m in library} == set(LIBRARY)
    bad = _imports_of_tools(library)
    assert bad == [], f"library modules that import the maintainer tools (outside the wheel): {bad}"


@pytest.mark.parametrize(
    "source",
    [
        "import tools\n",
        "import tools.audit as audit\n",
        "from tools import soak\n",
        "from tools.campaign import CampaignError\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tools.precision import PrecisionReport\n",
        "def f():\n    from tools.broken import skipping\n    return skipping\n",
        "import importlib\nimportlib.import_module('tools.soak')\n",
    ],
)
def test_the_tools_rule_catches_an_import(tmp_path: Path, source: str) -> None:
    path = tmp_path / "module.py"
    path.write_text(source)
    assert _imports_of_tools({"rewrite.module": path}) != []
    path.write_text("import toolsmith\nfrom rewrite import tools\nfrom aliasing.tools import x\n")
    assert _imports_of_tools({"rewrite.module": path}) == []


def _layers() -> list[list[str]]:
    """The layers of ``aliasing`` as its package docstring lists them (``Layering`` section)."""
    doc = aliasing.__doc__ or ""
    section = doc.split("Layering", 1)[1]
    layers: list[list[str]] = []
    for line in section.splitlines():
        line = line.strip()
        if line[:1].isdigit() and "." in line:
            names = line.split(".", 1)[1].split(":")[0]
            layers.append([f"aliasing.{n.strip()}" for n in names.split(",")])
    return layers


def test_aliasing_modules_import_only_layers_above() -> None:
    layers = _layers()
    level = {m: i for i, names in enumerate(layers) for m in names}
    modules = [m for m in _sources() if m.startswith("aliasing.")]
    assert sorted(level) == sorted(modules), "every aliasing module is in exactly one layer of the docstring"
    g = _graph()
    bad = [
        (a, b)
        for a, b in g.edges
        if a in level and b in level and level[b] >= level[a]
    ]
    assert bad == [], f"imports against the layering (module -> module of its own or a lower layer): {bad}"


@pytest.mark.parametrize(
    ("prefix", "allowed"),
    [("torch._inductor", {"rewrite.inductor.passes"}), ("vllm", {"rewrite.vllm"}), ("sglang", {"rewrite.sglang"})],
)
def test_confined_dependencies(prefix: str, allowed: set[str]) -> None:
    users = {
        module
        for module, path in _sources().items()
        if any(i == prefix or i.startswith(prefix + ".") for i in _runtime_imports(path, module))
    }
    assert users <= allowed


#: Modules that set ``meta['val']`` on nodes they create themselves (never on existing nodes), and
#: the one module that recomputes existing nodes' fake values where a program lost their storage
#: identity (and marks inputs whose storage offsets no run is held to).
CREATES_NODES = {"rewrite.editing.nodes", "aliasing.core.fake_values"}


def test_nothing_writes_node_meta() -> None:
    offenders = []
    for module, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"update", "setdefault", "pop", "clear"}
                and _is_meta(node.func.value)
            ):
                offenders.append(f"{module}:{node.lineno}")
            for t in targets:  # (a GraphModule's own ``.meta = ...`` is not node metadata)
                if isinstance(t, ast.Subscript) and _is_meta(t.value) and module not in CREATES_NODES:
                    offenders.append(f"{module}:{node.lineno}")
    assert offenders == []


def _is_meta(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "meta"


def _is_private(name: str) -> bool:
    """One leading underscore, not a dunder: ``_name``, not ``__all__``."""
    return name.startswith("_") and not name.startswith("__")


def _dotted(expr: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        inner = _dotted(expr.value)
        return None if inner is None else f"{inner}.{expr.attr}"
    return None


def _private_imports(sources: dict[str, Path], modules: set[str]) -> list[str]:
    """``module:line target._name`` for each private name of another module of ``modules`` that one
    of ``sources`` imports: ``from target import _name`` (relative ones resolved), or ``alias._name``
    where ``alias`` is a module of ``modules`` bound by ``import target [as alias]`` or
    ``from package import target [as alias]`` (imports anywhere: function bodies and
    ``if TYPE_CHECKING:`` blocks too). A module's use of its own private names is not one."""
    found: list[str] = []
    for module, path in sources.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = _package_of(path, module)
        bound: dict[str, str] = {}  # local name -> the module it names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        bound[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = _from_base(node, package)
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                    if _is_private(alias.name) and base in modules and base != module:
                        found.append(f"{module}:{node.lineno} {base}.{alias.name}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head not in bound:
                continue
            target = ".".join([bound[head], rest]) if rest else bound[head]
            if target in modules and target != module:
                found.append(f"{module}:{node.lineno} {target}.{node.attr}")
    return sorted(found)


def test_no_module_imports_another_modules_private_names() -> None:
    sources = _sources()
    library = {m: p for m, p in sources.items() if m.split(".")[0] in LIBRARY}
    bad = _private_imports(library, set(sources))
    assert bad == [], f"library modules that import another module's private name: {bad}"


@pytest.mark.parametrize(
    "source",
    [
        "from rewrite.inductor.fixes import _helper\n",
        "from rewrite.inductor.fixes import log, _helper as helper\n",
        "from .fixes import _helper\n",
        "from ..inductor.fixes import _helper\n",
        "from rewrite.inductor import _helper\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rewrite.inductor.fixes import _Helper\n",
        "def f():\n    from aliasing.core.effects import _helper\n    return _helper\n",
        "import rewrite.inductor.fixes\nrewrite.inductor.fixes._helper()\n",
        "import rewrite.inductor.fixes as fixes\nfixes._helper()\n",
        "from rewrite.inductor import fixes\nfixes._helper()\n",
        "from rewrite.inductor import fixes as c\nx = c._CONSTANT\n",
    ],
)
def test_the_private_name_rule_catches_an_import(tmp_path: Path, source: str) -> None:
    path = tmp_path / "module.py"
    modules = set(_sources())
    path.write_text(source)
    assert _private_imports({"rewrite.inductor.module": path}, modules) != []
    path.write_text(
        "import torch\nimport torch.fx\nfrom torch.utils import _pytree\nfrom rewrite.inductor.fixes import log\n"
        "from rewrite.inductor import fixes\nfrom . import fixes as c\n"
        "x = torch._ops.OpOverload\ny = fixes.__name__, c.log, fixes.log.__class__\n"
        "def _own():\n    return _own\n"
        "class _Own:\n    def f(self):\n        return self._attr, _Own._other\n"
    )
    assert _private_imports({"rewrite.inductor.module": path}, modules) == []
    path.write_text("from rewrite.inductor.module import _own\nimport rewrite.inductor.module as me\nme._own()\n")
    assert _private_imports({"rewrite.inductor.module": path}, modules) == []  # its own private names


#: The longest function or method body of the library, in lines.
MAX_BODY_LINES = 60


def _long_functions(sources: dict[str, Path], limit: int = MAX_BODY_LINES) -> list[str]:
    """``module:line name (n lines)`` for each function or method (nested ones too) whose body,
    from its first statement after the docstring to its last line, is longer than ``limit`` lines."""
    found: list[str] = []

    def visit(node: ast.AST, module: str, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, module, scope)
                continue
            name = f"{scope}.{child.name}" if scope else child.name
            if not isinstance(child, ast.ClassDef):
                body = child.body[1:] if ast.get_docstring(child, clean=False) is not None else child.body
                lines = (child.end_lineno or child.lineno) - body[0].lineno + 1 if body else 0
                if lines > limit:
                    found.append(f"{module}:{child.lineno} {name} ({lines} lines)")
            visit(child, module, name)

    for module, path in sources.items():
        visit(ast.parse(path.read_text(), filename=str(path)), module, "")
    return sorted(found)


def test_no_function_body_longer_than_the_limit() -> None:
    library = {m: p for m, p in _sources().items() if m.split(".")[0] in LIBRARY}
    bad = _long_functions(library)
    assert bad == [], f"functions whose body is longer than {MAX_BODY_LINES} lines (split them): {bad}"


def test_the_body_length_rule_counts_from_the_first_statement(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    statements = "".join(f"    x{i} = {i}\n" for i in range(MAX_BODY_LINES))
    docstring = '    """A docstring\n\n    of four lines.\n    """\n'
    path.write_text(f"def f():\n{docstring}{statements}")
    assert _long_functions({"rewrite.module": path}) == []
    path.write_text(f"def f():\n{docstring}{statements}    return x0\n")
    assert _long_functions({"rewrite.module": path}) == [f"rewrite.module:1 f ({MAX_BODY_LINES + 1} lines)"]
    nested = "".join(f"            y{i} = {i}\n" for i in range(MAX_BODY_LINES + 1))
    path.write_text(f"class C:\n    @property\n    def g(self):\n        def h():\n{nested}        return h\n")
    assert _long_functions({"rewrite.module": path}) == [
        f"rewrite.module:3 C.g ({MAX_BODY_LINES + 3} lines)",
        f"rewrite.module:4 C.g.h ({MAX_BODY_LINES + 1} lines)",
    ]


def test_hypothesis_is_only_a_test_dependency() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]]
    assert "hypothesis" not in names
    assert any(d.startswith("hypothesis") for d in project["optional-dependencies"]["test"])


#: Run with ``import hypothesis`` failing: every runtime module and the CLI's demo and ``rewrite --check``.
_WITHOUT_HYPOTHESIS = """
import contextlib, io, sys, tempfile
from pathlib import Path
sys.modules["hypothesis"] = None  # any import of hypothesis now raises ImportError

import torch
import aliasing, rewrite, rewrite.cli, rewrite.explain, rewrite.inductor
from rewrite.testing import OracleError, check_analysis, check_equivalent, copy_program
from rewrite.testing.equivalence import check_equivalent as same

assert same is check_equivalent
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = rewrite.cli.main(["demo", "--seed", "1"])  # traces, rewrites and checks equivalence
assert rc == 0, out.getvalue()
assert "equivalent: yes" in out.getvalue(), out.getvalue()

class M(torch.nn.Module):
    def forward(self, x):
        return (x * 2).clone() + 1

with tempfile.TemporaryDirectory() as tmp:
    src, dst = Path(tmp, "p.pt2"), Path(tmp, "q.pt2")
    torch.export.save(torch.export.export(M(), (torch.randn(4),)), src)
    with contextlib.redirect_stdout(out):
        rc = rewrite.cli.main(["rewrite", str(src), "-o", str(dst), "--check"])
    assert rc == 0, out.getvalue()
    assert "equivalent on the saved example inputs: yes" in out.getvalue(), out.getvalue()

try:
    from rewrite.testing import programs  # the fuzzer: needs hypothesis
except ImportError:
    pass
else:
    raise AssertionError("rewrite.testing.programs imported without hypothesis")
loaded = sorted(m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] == "hypothesis")
assert loaded == [], loaded
print("ok")
"""


@pytest.mark.integration
def test_runtime_modules_and_cli_run_without_hypothesis(tmp_path: Path) -> None:
    script = tmp_path / "without_hypothesis.py"
    script.write_text(textwrap.dedent(_WITHOUT_HYPOTHESIS))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")


def test_testing_package_keeps_its_names() -> None:
    """Every name of ``rewrite.testing.__all__`` resolves (the fuzzer's lazily), and is what its module defines."""
    import rewrite.testing as testing
    from rewrite.editing.copying import copy_program
    from rewrite.testing import programs as programs_strategy
    from rewrite.testing.programs import programs

    assert all(getattr(testing, name) is not None for name in testing.__all__)
    assert programs_strategy is programs and callable(programs_strategy)
    assert testing.copy_program is copy_program

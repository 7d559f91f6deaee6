"""The package's shape: layers, public surface, moved names (docs/architecture.md)."""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import rlarrow
from rlarrow import _moved

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlarrow"
LINT_IMPORTS = (shutil.which("lint-imports", path=str(Path(sys.executable).parent))
                or shutil.which("lint-imports"))


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is a dev dependency: pip install -e '.[dev]'")
def test_import_contracts_hold():
    """pyproject's [tool.importlinter] contracts: layers, independent formats, no cycles."""
    out = subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout and "4 kept" in out.stdout, out.stdout[-2000:]


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is a dev dependency: pip install -e '.[dev]'")
def test_the_core_floors_contract_breaks_when_the_model_imports_the_store(tmp_path):
    """The data model below the store: schema.py importing the store (even lazily) breaks the contract."""
    shutil.copytree(PACKAGE, tmp_path / "rlarrow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    schema = tmp_path / "rlarrow" / "core" / "schema.py"
    crossing = "\n\ndef _crossing() -> None:\n    import rlarrow.core.store  # noqa\n"
    schema.write_text(schema.read_text() + crossing)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode != 0, out.stdout[-2000:]
    assert "Core: the data model below the store, the store below what builds on it BROKEN" in out.stdout
    assert "rlarrow.core.schema -> rlarrow.core.store" in out.stdout, out.stdout[-2000:]


def test_layer_folders_are_the_documented_ones():
    layers = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert layers == ["cli", "core", "io", "query", "record", "train"]
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    for layer in layers:
        assert f"rlarrow/{layer}/" in architecture, f"docs/architecture.md does not describe rlarrow/{layer}/"


def test_no_two_modules_share_a_name():
    """A module's name says what it is: none is named like another in a different folder."""
    seen: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        assert path.stem not in seen, f"{path.relative_to(ROOT)} and {seen[path.stem].relative_to(ROOT)}"
        seen[path.stem] = path


BLOCKER = """
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {names!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Block())
"""
EXTRAS = ["torch", "ray", "dm_env", "envlogger", "gymnasium", "tensorboard", "tensorflow", "matplotlib",
          "skrl", "tianshou", "minari"]


def test_star_import_needs_no_extra():
    code = textwrap.dedent(BLOCKER.format(names=EXTRAS)) + textwrap.dedent("""
        import warnings
        warnings.simplefilter("error")
        from rlarrow import *
        import rlarrow
        missing = [n for n in rlarrow.__all__ if n not in globals()]
        assert not missing, missing
        print(Store.__module__.rsplit("._", 1)[0], sql.__module__, SummaryWriter.__module__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["rlarrow.core.store", "rlarrow.query.connection", "rlarrow.record.logger"]


def _top_level_names(tree: ast.Module) -> tuple[set[str], list[str] | None]:
    """Names a module defines at its top level (not those it imports), and its ``__all__``."""
    defined: set[str] = set()
    all_: list[str] | None = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if not isinstance(target, ast.Name):
                    continue
                if target.id == "__all__":
                    all_ = ast.literal_eval(node.value) if node.value is not None else None
                elif not (isinstance(node.value, ast.Call)
                          and getattr(node.value.func, "id", "") == "require"):
                    defined.add(target.id)  # (a module handle from require() is not API)
    return defined, all_


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _missing_extra(module: str) -> str | None:
    """The optional package ``module`` cannot import without (torch, ray, dm_env, ...), or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # old paths warn; that is tested below
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            return exc.name
    return None


def _needs_extras(module: str) -> pytest.MarkDecorator:
    missing = _missing_extra(module)
    return pytest.mark.skipif(missing is not None, reason=f"{module} needs {missing}, an optional extra "
                              "(pip install -e '.[all]' installs every one)")


#: the total of every module's ``__all__``: pinned, so the surface narrows or widens only on purpose
#: (narrowed from 1,037 names to 383 in issue 37: helpers left ``__all__``, users' names stayed;
#: 385 in issue 38: ``rlarrow.train.sampling.Ledger``, what a resume state says was delivered, and
#: ``rlarrow.core.tensors.TensorBytesType``, a binary-layout tensor as Polars hands it back)
SURFACE = 385
#: names a module may list without a docstring or a ``#:`` comment: none since issue 37 narrowed the last;
#: none may be added, and each fixed one leaves this set
UNDOCUMENTED: set[tuple[str, str]] = set()
INTERNAL = re.compile(r"^Internal:", re.MULTILINE)


def _all_of(tree: ast.Module) -> list[str] | None:
    return _top_level_names(tree)[1]


def _source_of(module: str) -> Path | None:
    """The file of an rlarrow module (found without importing it), or None."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if module.split(".")[0] == "rlarrow" and path.is_file():
            return path
    return None


def _commented(lines: list[str], lineno: int) -> bool:
    """A ``#:`` comment block right above line ``lineno`` (1-based) documents what it assigns."""
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        if lines[i].lstrip().startswith("#:"):
            return True
        i -= 1
    return False


def _is_documented(module: str, name: str, depth: int = 0) -> bool:
    """``name`` of ``module`` has a docstring, or (a constant, a type alias) a ``#:`` comment or a
    string right after it; a name the module imports is judged where it is defined."""
    path = _source_of(module)
    if path is None or depth > 5:
        return False
    source = path.read_text()
    lines = source.splitlines()
    body = ast.parse(source).body
    for i, node in enumerate(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_docstring(node) is not None
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            after = body[i + 1] if i + 1 < len(body) else None
            docstring = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                and isinstance(after.value.value, str)
            return docstring or _commented(lines, node.lineno)
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                base = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                source_module = f"{base}.{node.module}" if node.level and node.module else \
                    base if node.level else node.module
                assert source_module is not None
                if _source_of(f"{source_module}.{alias.name}") is not None:  # a submodule
                    return _module_docstring(f"{source_module}.{alias.name}")
                return _is_documented(source_module, alias.name, depth + 1)
    return _module_docstring(f"{module}.{name}")  # a subpackage the package gives lazily


def _module_docstring(module: str) -> bool:
    path = _source_of(module)
    return path is not None and ast.get_docstring(ast.parse(path.read_text())) is not None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_all_lists_its_user_api(path):
    """``__all__`` is the module's user API: what users call, each name documented (docs/architecture.md).

    The convention (polars', httpx's, pandas'): a name users call is in ``__all__`` and documented
    (a docstring, or a ``#:`` comment on a constant or type alias); a helper other modules of rlarrow
    import is a plain name (no underscore, so importing it across modules is allowed) left out of
    ``__all__``; a helper only its own module uses has a leading underscore. A module with no user
    API says ``Internal:`` in its docstring and has ``__all__ = []``.
    """
    tree = ast.parse(path.read_text())
    all_ = _all_of(tree)
    rel = path.relative_to(ROOT)
    assert all_ is not None, f"{rel} has no __all__: list its user API (or [] and an Internal: docstring)"
    assert len(all_) == len(set(all_)), f"{rel}: __all__ repeats a name"
    if not all_ and not path.stem.startswith("_"):
        assert INTERNAL.search(ast.get_docstring(tree) or ""), \
            f"{rel}: __all__ is empty; say 'Internal: ...' in its docstring (what it is for, who imports it)"
    module = _module_name(path)
    undocumented = [n for n in all_ if n != "__version__" and not _is_documented(module, n)
                    and (module, n) not in UNDOCUMENTED]
    assert not undocumented, (f"{rel}: __all__ lists {undocumented} without a docstring (a constant or type "
                              "alias: a '#:' comment above it); document them or leave them out of __all__")


def test_the_surface_is_pinned():
    """The total of every ``__all__``: a name added to or dropped from the user API is a deliberate change."""
    total = sum(len(_all_of(ast.parse(p.read_text())) or []) for p in MODULES)
    assert total == SURFACE, (f"the modules' __all__ list {total} names, SURFACE pins {SURFACE}: a narrower "
                              "surface lowers the pin; a wider one raises it (and the commit says why)")


def test_the_undocumented_leftovers_are_still_there():
    fixed = sorted(pair for pair in UNDOCUMENTED if _is_documented(*pair)
                   or pair[1] not in (_all_of(ast.parse(_source_of(pair[0]).read_text())) or []))  # type: ignore[union-attr]
    assert not fixed, f"fixed: remove these from UNDOCUMENTED so they cannot come back: {fixed}"


@pytest.mark.parametrize("path", [pytest.param(p, marks=_needs_extras(_module_name(p)),
                                               id=str(p.relative_to(PACKAGE))) for p in MODULES])
def test_every_name_in_all_exists(path):
    module = _module_name(path)
    mod = importlib.import_module(module)
    for name in getattr(mod, "__all__", []):
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which it does not have"


@pytest.mark.parametrize(("old", "new"), [pytest.param(old, new, marks=_needs_extras(new), id=old)
                                          for old, new in sorted(_moved.MOVED.items())])
def test_old_module_paths_still_import_and_warn(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} has moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_old_attribute_paths_still_resolve():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        sys.modules.pop("rlarrow.store", None)
        rlarrow.__dict__.pop("store", None)
        assert rlarrow.store.Store is rlarrow.Store  # type: ignore[attr-defined]


#: builtins rlarrow may raise itself (core/errors.py says why: Python's protocols want them);
#: every other deliberate error is an RLArrowError
BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, BaseException)}
ALLOWED_BUILTINS = {"IndexError", "NotImplementedError", "AttributeError", "StopIteration"} | {
    name for name in BUILTIN_ERRORS if issubclass(getattr(builtins, name), OSError)}


def test_deliberate_errors_are_rlarrow_errors():
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = exc.id if isinstance(exc, ast.Name) else None
                if name in BUILTIN_ERRORS and name not in ALLOWED_BUILTINS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: raise {name}")
    assert not found, "raise an rlarrow error (rlarrow/core/errors.py) instead:\n" + "\n".join(sorted(found))


OLD_NAMES = json.loads((ROOT / "tests" / "fixtures" / "public_names_0.1.json").read_text())


@pytest.mark.parametrize("old", [pytest.param(old, marks=_needs_extras(old), id=old)
                                 for old in sorted(OLD_NAMES)])
def test_every_public_name_of_0_1_still_resolves_by_its_old_path(old):
    """The public names each module of rlarrow 0.1 had (frozen from its source) resolve as before."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
        missing = [name for name in OLD_NAMES[old] if not hasattr(module, name)]
    assert not missing, f"{old} lost {missing}"


def test_an_old_path_keeps_the_new_modules_spec_and_runs_with_dash_m():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import rlarrow.core.store as new

        sys.modules.pop("rlarrow.store", None)
        importlib.import_module("rlarrow.store")
        assert new.__spec__ is not None and new.__spec__.name == "rlarrow.core.store"
        assert new.__spec__.submodule_search_locations  # still a package: reload and imports work
        # `python -m rlarrow.demo` (runpy asks the loader for the code): the new module's code
        sys.modules.pop("rlarrow.demo", None)
        code = importlib.util.find_spec("rlarrow.demo").loader.get_code("rlarrow.demo")
    assert code is not None and code.co_filename.endswith(os.path.join("cli", "demo.py"))


def test_no_module_reaches_another_through_attributes():
    """Imports are what the contracts see: no ``rlarrow.x.y`` attribute chains, no bare layer imports.

    A layer package gives its submodules as attributes on first use (``rlarrow.io.tfevents``), which
    would let a module use another without an import import-linter can see.
    """
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli" or rel == Path("__init__.py"):
            continue  # the top layer may use anything; the root is the lazy public surface
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "rlarrow":
                found.append(f"{rel}:{node.lineno}: rlarrow.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "rlarrow":
                found += [f"{rel}:{node.lineno}: from rlarrow import {a.name}" for a in node.names
                          if a.name in ("cli", "core", "io", "query", "record", "train")]
            elif isinstance(node, ast.Import):
                found += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names
                          if a.name in ("rlarrow", *(f"rlarrow.{p}" for p in ("cli", "core", "io", "query",
                                                                               "record", "train")))]
    assert not found, "import the module you use instead:\n" + "\n".join(sorted(found))


@pytest.mark.skipif(shutil.which("radon", path=os.path.dirname(sys.executable)) is None,
                    reason="radon is a dev dependency (pip install -e '.[dev]')")
def test_no_function_is_graded_f() -> None:
    """radon's cyclomatic complexity: no function of rlarrow graded F (over 40 paths)."""
    radon = shutil.which("radon", path=os.path.dirname(sys.executable))
    assert radon is not None
    out = subprocess.run([radon, "cc", "-n", "F", str(ROOT / "rlarrow")], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "", f"functions graded F (split them into named steps):\n{out}"


def test_tests_mirror_the_package() -> None:
    """Each folder of tests names a folder of the package (tests/core/store/ tests rlarrow/core/store/)."""
    tests = Path(__file__).resolve().parent
    skip = {"fixtures", "fuzz", "__pycache__"}
    folders = [p for p in tests.rglob("*") if p.is_dir() and not skip & set(p.relative_to(tests).parts)]
    assert folders, "no test folders"
    for folder in folders:
        assert (ROOT / "rlarrow" / folder.relative_to(tests)).is_dir(), \
            f"tests/{folder.relative_to(tests)} mirrors no rlarrow/{folder.relative_to(tests)}"

"""The store's internal API: code outside ``rlarrow/core/store/`` uses only its public names.

The first tests walk the source with :mod:`ast`: a module outside the store package may
not import a private name (``_x``) or a private submodule of it, nor reach for a private
method or attribute of the store's classes on any object but ``self``/``cls``. The rest
exercise the public methods that replaced those private ones, on a real store.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlarrow
from rlarrow.core import store as store_package
from rlarrow.core.errors import SchemaMismatchError, StoreError

ROOT = Path(rlarrow.__file__).parent
STORE_DIR = ROOT / "core" / "store"
STORE_MODULE = "rlarrow.core.store"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def store_private_names(directory: Path = STORE_DIR) -> set[str]:
    """Private methods and attributes of the store package's classes (``def _x``, ``self._x =``)."""
    names: set[str] = set()
    for path in sorted(directory.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=os.fspath(path))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(node.name):
                    names.add(node.name)
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                    targets = [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                                and sub.value.id in ("self", "cls") and _is_private(sub.attr)):
                            names.add(sub.attr)
                if isinstance(node, (ast.AnnAssign, ast.Assign)) and node in cls.body:
                    for target in targets:  # class-level ``_x = ...``
                        if isinstance(target, ast.Name) and _is_private(target.id):
                            names.add(target.id)
        for node in tree.body:  # module-level ``def _x``, ``_X = ...``: reached as ``files._x``
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and _is_private(node.name):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Name) and _is_private(target.id):
                        names.add(target.id)
    return names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an ``import from`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _in_store(module: str) -> bool:
    return module == STORE_MODULE or module.startswith(STORE_MODULE + ".")


def violations(path: Path, private: set[str], source: str | None = None) -> list[str]:
    """``file:line: what`` for each use of a private name of the store in one module."""
    text = path.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text, filename=os.fspath(path))
    module = _module_name(path)
    rel = path.relative_to(ROOT.parent)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source_module = _absolute(node, module, path.name == "__init__.py")
            if not _in_store(source_module):
                continue
            for part in source_module[len(STORE_MODULE):].split("."):
                if _is_private(part):
                    found.append(f"{rel}:{node.lineno}: imports from the private module {source_module}")
            for alias in node.names:
                if _is_private(alias.name):
                    found.append(f"{rel}:{node.lineno}: imports the private name {alias.name} "
                                 f"from {source_module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _in_store(alias.name) and any(_is_private(p) for p in alias.name.split(".")):
                    found.append(f"{rel}:{node.lineno}: imports the private module {alias.name}")
        elif isinstance(node, ast.Attribute) and node.attr in private:
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"{rel}:{node.lineno}: uses {node.attr}, a private name of the store's classes")
        elif isinstance(node, ast.Call) and _reflective(node.func):
            # getattr(st, "_manifest"), operator.attrgetter("_locked"): the same reach, spelled as text
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and \
                        any(part in private for part in arg.value.split(".")):
                    found.append(f"{rel}:{node.lineno}: uses {arg.value!r}, a private name of the store, "
                                 "by name")
    return found


def _reflective(func: ast.expr) -> bool:
    """``getattr``, ``hasattr``, ``setattr``, ``attrgetter`` and ``methodcaller``, however imported."""
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name in ("getattr", "hasattr", "setattr", "attrgetter", "methodcaller")


def checked_files() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py")) if STORE_DIR not in p.parents]


def test_private_names_are_collected():
    private = store_private_names()
    # what the store keeps to itself: found by the walk (not a fixed list)
    assert {"_locked", "_manifest", "_recover", "_write_manifest"} <= private
    assert not any(n.startswith("__") and n.endswith("__") for n in private)


def test_code_outside_the_store_uses_only_its_public_names():
    private = store_private_names()
    found = [v for path in checked_files() for v in violations(path, private)]
    assert not found, "private names of rlarrow.core.store used outside it:\n" + "\n".join(found)


@pytest.mark.parametrize("plant", [
    "from rlarrow.core.store import _tmp_owner\n",
    "from rlarrow.core.store.manifest import _something\n",
    "from rlarrow.core.store._private import x\n",
    "import rlarrow.core.store._private\n",
    "def f(st):\n    return st._locked()\n",
    "def f(st):\n    return st._manifest['tables']\n",
    "def f(st):\n    return getattr(st, '_manifest')\n",
    "import operator\nlocked = operator.attrgetter('_locked')\n",
    "from rlarrow.core.store import files\nf = files._TMP_SUFFIX\n",
])
def test_a_planted_violation_is_named_with_its_line(plant):
    path = ROOT / "query" / "planted.py"
    found = violations(path, store_private_names(), source="import os\n" + plant)
    line = 1 + plant.count("\n")  # the plant's last line
    assert found and found[0].startswith(os.path.join("rlarrow", "query", "planted.py") + f":{line}: "), found


@pytest.mark.parametrize("clean", [
    "from rlarrow.core.store import Store, encode_schema\n",
    "from ..core.store import Store\n",
    "class A:\n    def f(self):\n        return self._manifest\n",
    "def f(st):\n    return st.manifest_view()\n",
    "from rlarrow.core import schema as _schema\n",
])
def test_public_use_is_not_flagged(clean):
    path = ROOT / "query" / "planted.py"
    assert violations(path, store_private_names(), source=clean) == []


def test_relative_import_of_a_private_name_is_flagged():
    path = ROOT / "query" / "planted.py"
    found = violations(path, store_private_names(), source="from ..core.store import _tmp_owner\n")
    assert found and "_tmp_owner" in found[0]


# ---------------------------------------------------------------- the public API, on real stores


def _memory(run: str, **tensors):
    return {"run_id": run, "snapshot_id": 0, "memory_index": [0], "env_index": 0, "memory_size": 1,
            "num_envs": 1, **tensors}


@pytest.fixture
def two_layouts(tmp_path):
    """A store whose ``memory`` has two layouts: ``states`` of other shapes, ``values`` in both."""
    store = rlarrow.Store.create(tmp_path / "s")
    store.append("memory", _memory("a", states=np.zeros((1, 2), "f4"), values=np.ones((1, 1), "f4")))
    store.append("memory", _memory("b", states=np.zeros((1, 3), "f4"), values=np.ones((1, 1), "f4")))
    return store


def test_layout_dirs_select_directories_from_the_current_view(two_layouts):
    st = two_layouts
    assert st.layout_dirs("memory") == ["memory", "memory.2"]
    assert st.layout_dirs("memory", 1) == ["memory"] and st.layout_dirs("memory", 2) == ["memory.2"]
    assert st.layout_dirs("steps") == ["steps"]  # no data yet: its own directory
    assert st.layout_dirs("memory.2") == ["memory.2"]
    with pytest.raises(StoreError, match="no layout 3"):
        st.layout_dirs("memory", 3)
    with pytest.raises(TypeError):
        st.layout_dirs("memory", "binary")  # type: ignore[arg-type]
    # the view of the last refresh: another writer's new layout shows after one
    other = rlarrow.Store.open(st.path)
    other.append("memory", _memory("c", states=np.zeros((1, 5), "f4")))
    assert st.layout_dirs("memory") == ["memory", "memory.2"]
    st.refresh()
    assert st.layout_dirs("memory") == ["memory", "memory.2", "memory.3"]
    # the paths files() gives are in those directories
    assert {p.parent.name for p in st.files("memory")} == set(st.layout_dirs("memory"))


def test_left_out_columns_and_check_columns_behave_as_read(two_layouts):
    st = two_layouts
    left = st.left_out_columns("memory")
    assert list(left) == ["states"] and len(left["states"]) == 2 and "memory.2/" in left["states"][1]
    assert st.left_out_columns("memory", layout=2) == {} and st.left_out_columns("steps") == {}
    st.check_columns("memory", ["run_id", "values"])  # columns every layout has: fine
    with pytest.raises(SchemaMismatchError, match="states"):
        st.check_columns("memory", ["states"])
    st.check_columns("memory", ["states"], layout=2)  # one layout: nothing left out
    with pytest.warns(rlarrow.RLArrowWarning, match="states"):
        st.check_columns("memory")
    st.check_columns("memory")  # said once per store object and table
    fresh = rlarrow.Store.open(st.path)
    with pytest.warns(rlarrow.RLArrowWarning):
        fresh.read("memory")  # read goes through the same check
    assert "states" not in fresh.read("memory").column_names


def test_manifest_is_a_refreshed_copy(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    copy = st.manifest()
    copy["tables"]["scalars"]["rows"] = 99
    assert st.manifest()["tables"]["scalars"]["rows"] == 0  # a copy: the store is unchanged
    other = rlarrow.Store.open(st.path)
    other.append("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": [0], "value": [1.0]})
    assert st.manifest(refresh=False)["tables"]["scalars"]["rows"] == 0  # the old view
    m = st.manifest()
    assert m["tables"]["scalars"]["rows"] == 1 and m["pending"] is None
    assert [f["name"] for f in m["tables"]["scalars"]["files"]] == [p.name for p in st.files("scalars")]


def test_maintenance_rewrites_journaled_and_writes_the_manifest(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s", auto_compact=None)
    for step in range(3):
        st.append("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": [step],
                              "value": [float(step)]})
    before = st.read("scalars")
    with st.maintenance() as m:
        names = [f["name"] for f in m.manifest["tables"]["scalars"]["files"]]
        m.rewrite("scalars", names, transform=lambda t: t.set_column(
            t.schema.get_field_index("value"), "value",
            pa.array([v * 2 for v in t.column("value").to_pylist()])))
        assert len(m.manifest["tables"]["scalars"]["files"]) == 1  # the manifest is updated
        m.manifest["writer"] = "a migration"
        m.write()
    reopened = rlarrow.Store.open(st.path)
    assert reopened.manifest()["writer"] == "a migration"
    assert reopened.read("scalars").column("value").to_pylist() == [0.0, 2.0, 4.0]
    assert reopened.read("scalars").column("step").equals(before.column("step"))
    assert len(list((st.path / "scalars").glob("part-*.parquet"))) == 1  # the old files are gone
    with pytest.raises(StoreError, match="cannot write"):
        with rlarrow.Store.open(st.path, readonly=True).maintenance():
            pass


def test_staged_files_commit_all_together_into_their_layout(two_layouts, tmp_path):
    st = two_layouts
    rows = rlarrow.core.schema.build("memory", {**_memory("c", states=np.zeros((1, 3), "f4"),
                                                          values=np.ones((1, 1), "f4")),
                                                "memory_index": [0]})
    rows = pa.concat_tables([rows] * 4)
    from rlarrow.core.store import validate_rows

    rows = validate_rows("memory", rows, st.schema("memory", layout=2))
    with st.stage("memory", tag="test") as staging:
        clone = __import__("pickle").loads(__import__("pickle").dumps(staging))  # it travels to tasks
        staged = [clone.write(rows.slice(0, 3)), clone.write(rows.slice(3))]
        assert all(os.path.basename(f.path).startswith(staging.owner) for f in staged)
        assert staged[0].runs == ("c",) and staged[0].rows == 3
        assert st.row_count("memory", layout=2) == 1  # nothing committed yet
        info = st.commit_staged(staged)
    assert info is not None and info.rows == 4 and len(info.files) == 2
    assert all(f.startswith("memory.2/") for f in info.files)  # the layout of their types
    assert st.layout_of("memory", "c") == 2 and st.row_count("memory", layout=2) == 5
    assert not [p for p in (st.path / "memory").iterdir() if p.name.startswith(".tmp-")]
    assert st.commit_staged([]) is None


def _scalars(steps: list[int]) -> pa.Table:
    return rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "t", "tag": "x", "step": steps,
                                                 "value": [1.0] * len(steps)})


def _stage_and_fail(st: rlarrow.Store) -> None:
    with st.stage("scalars") as staging:
        staging.write(_scalars([0, 1]))
        assert list((st.path / "scalars").glob(staging.owner + "*"))
        raise RuntimeError("the job failed")


def test_staged_files_that_are_not_committed_are_removed(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    with pytest.raises(RuntimeError, match="the job failed"):
        _stage_and_fail(st)
    assert not [p for p in (st.path / "scalars").iterdir() if p.name.startswith(".tmp-")]
    assert st.row_count("scalars") == 0


def test_staged_files_of_other_types_are_refused_together(tmp_path):
    from rlarrow.core.store import validate_rows

    st = rlarrow.Store.create(tmp_path / "s")
    small = validate_rows("memory", _memory("a", states=np.zeros((1, 2), "f4")), None)
    large = validate_rows("memory", _memory("a", states=np.zeros((1, 3), "f4")), None)
    with st.stage("memory") as staging:
        files = [staging.write(small), staging.write(large)]
        with pytest.raises(SchemaMismatchError, match="disagree"):
            st.commit_staged(files)
    assert st.row_count("memory") == 0
    assert not [p for p in (st.path / "memory").iterdir() if p.name.startswith(".tmp-")]


def _commit_staged_then_fail(st: rlarrow.Store) -> None:
    with st.transaction():
        st.commit_staged([st.stage("scalars").write(_scalars([0, 1]))])
        assert st.row_count("scalars") == 2  # this object reads its transaction's rows
        raise RuntimeError("abort")


def test_staged_files_join_a_transaction(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    with pytest.raises(RuntimeError, match="abort"):
        _commit_staged_then_fail(st)
    assert rlarrow.Store.open(st.path).row_count("scalars") == 0
    assert not [p for p in (st.path / "scalars").iterdir() if p.name.startswith(".tmp-")]


def test_schema_text_round_trips_and_roll_forward_applies_a_complete_step(tmp_path):
    schema = pa.schema([("step", pa.int64()), ("value", pa.float64())])
    assert store_package.decode_schema(store_package.encode_schema(schema)).equals(schema)
    manifest = {"tables": {"t": {"rows": 2, "files": [{"name": "a.parquet", "rows": 1, "bytes": 1},
                                                      {"name": "b.parquet", "rows": 1, "bytes": 1}]}},
                "retired": [], "pending": {"op": "compact", "table": "t", "old": ["a.parquet", "b.parquet"],
                                           "new": ["c.parquet"],
                                           "new_entries": [{"name": "c.parquet", "rows": 2, "bytes": 1}]}}
    assert store_package.roll_forward(manifest, exists=lambda rel: False) is False
    assert manifest["pending"] is not None and len(manifest["tables"]["t"]["files"]) == 2
    assert store_package.roll_forward(manifest, exists=lambda rel: rel == "t/c.parquet") is True
    assert [f["name"] for f in manifest["tables"]["t"]["files"]] == ["c.parquet"]
    assert manifest["retired"] == ["t/a.parquet", "t/b.parquet"] and manifest["pending"] is None
    assert store_package.table_of("steps.3") == "steps" and store_package.layout_number("steps.3") == 3
    assert store_package.layout_directory("steps", 2) == "steps.2"


def test_open_without_version_checks_or_recovery(tmp_path):
    import json

    st = rlarrow.Store.create(tmp_path / "s")
    path = st.path / store_package.MANIFEST_NAME
    m = json.loads(path.read_text())
    m["tables"]["scalars"]["schema_version"] = "0.1"  # an older major: refused unless migrating
    path.write_text(json.dumps(m))
    with pytest.raises(rlarrow.FormatVersionError):
        rlarrow.Store(st.path)
    assert rlarrow.Store(st.path, check_versions=False).row_count("scalars") == 0
    m["tables"]["scalars"]["schema_version"] = "1.0"
    path.write_text(json.dumps(m))
    stray = st.path / "scalars" / "part-29990101T000000000000-0f11e0f1.parquet"
    pq.write_table(rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "t", "tag": "x",
                                                         "step": [0], "value": [1.0]}), stray)
    rlarrow.Store(st.path, recover=False)
    assert json.loads(path.read_text())["tables"]["scalars"]["files"] == []  # not adopted
    rlarrow.Store(st.path)
    assert len(json.loads(path.read_text())["tables"]["scalars"]["files"]) == 1  # recovery adopts it


def test_row_group_bytes_set_on_the_package_is_what_appends_use(tmp_path, monkeypatch):
    from rlarrow.core.store import files

    monkeypatch.setattr(store_package, "ROW_GROUP_BYTES", 4096)
    assert files.ROW_GROUP_BYTES == 4096
    st = rlarrow.Store.create(tmp_path / "s")
    rows = rlarrow.core.schema.build("scalars", {"run_id": "r", "scope": "t", "tag": "x",
                                                 "step": np.arange(2000), "value": np.ones(2000)})
    info = st.append("scalars", rows, threads=2)
    assert info is not None and len(info.files) == 2  # over two row groups: written in parallel


_MODULES = sorted(p.stem for p in STORE_DIR.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", _MODULES)
def test_each_module_says_what_it_owns_and_its_examples_run(name, tmp_path, monkeypatch):
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(f"{STORE_MODULE}.{name}")
    assert module.__doc__ and len(module.__doc__.split()) > 10, f"{name} has no docstring"
    assert len((STORE_DIR / f"{name}.py").read_text().splitlines()) <= 700
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def _episodes(run: str, lengths: list[int]) -> dict[str, object]:
    return {"run_id": run, "episode_id": list(range(len(lengths))), "num_steps": lengths, "env_index": 0,
            "terminated": True, "truncated": False, "partial_start": False, "partial_end": False}


def test_the_catalog_adds_finds_labels_and_deletes_runs_and_episodes(tmp_path):
    from rlarrow.core.errors import ArgumentTypeError
    from rlarrow.core.store import Catalog

    store = rlarrow.Store.create(tmp_path / "s")
    catalog = store.catalog
    assert isinstance(catalog, Catalog) and catalog.store is store
    a = catalog.add_run(source="user", run_id="a", name="first", num_envs=2, metadata={"seed": 1})
    b = store.add_run(source="user", run_id="b")  # (the old method: the same runs table)
    assert (a, b) == ("a", "b") and catalog.has_run("b") and not catalog.has_run("c")
    with pytest.raises(StoreError, match="already exists"):
        catalog.add_run(source="user", run_id="a")
    assert catalog.runs().equals(store.runs()) and catalog.runs().num_rows == 2
    row = catalog.runs().filter(pa.compute.field("run_id") == "a").to_pylist()[0]
    assert (row["name"], row["num_envs"], row["source"]) == ("first", 2, "user")
    store.append("episodes", _episodes("a", [5, 9]))
    store.append("episodes", _episodes("b", [3]))
    assert catalog.episodes().num_rows == 3
    assert catalog.episodes("a").column("num_steps").to_pylist() == [5, 9]  # a bare string: one run
    assert catalog.episodes(["b"]).column("num_steps").to_pylist() == [3]
    assert catalog.episodes("c").num_rows == 0
    with pytest.raises(ArgumentTypeError, match="runs"):
        catalog.episodes(3)  # type: ignore[arg-type]
    version = store.version
    assert catalog.label({"split": "val"}, episodes=[("a", 1)]) == {"episodes": 1}
    assert catalog.episodes("a").column("metadata").to_pylist() == [None, '{"split":"val"}']
    assert store.version == version + 1  # (one commit)
    assert catalog.delete(runs=["b"]) == {"runs": 1, "episodes": 1}
    assert not catalog.has_run("b") and catalog.episodes().num_rows == 2


def test_the_catalog_uses_only_the_engines_public_methods():
    tree = ast.parse((STORE_DIR / "catalog.py").read_text(encoding="utf-8"))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute) and node.value.attr == "store"}
    assert used and not {name for name in used if name.startswith("_")}, used
    # (and the engine needs nothing of it: no module below the Store class imports the catalog)
    for path in STORE_DIR.glob("*.py"):
        modules = {n.module for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(n, ast.ImportFrom)}
        if path.stem not in {"catalog", "_store", "__init__"}:
            assert f"{STORE_MODULE}.catalog" not in modules, path.name

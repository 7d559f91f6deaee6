"""The RL catalog (runs, episodes, labels) is said in ``catalog.py`` only, on the engine's public methods.

The engine modules of ``rlarrow/core/store/`` keep files, manifest, journal, commits and the
Delta logs; what a run id is, what a ``runs`` row holds and which rows deleting or labelling
runs and episodes touches is the catalog's. The rest checks the catalog's verbs on a real store.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import rlarrow
from rlarrow.core.errors import ArgumentError, NotFoundError, StoreError
from rlarrow.core.store.catalog import Catalog, Selection, new_run_id

STORE_DIR = Path(rlarrow.__file__).parent / "core" / "store"
#: the catalog, and the Store class that keeps its verbs as delegates
CATALOG = {"catalog.py", "_store.py"}
VERBS = {"add_run", "has_run", "runs", "label", "delete", "new_run_id", "episodes"}


def _tree(name: str) -> ast.Module:
    return ast.parse((STORE_DIR / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(p.name for p in STORE_DIR.glob("*.py") if p.name not in CATALOG))
def test_no_engine_module_defines_the_catalog_or_builds_a_runs_row(name):
    tree = _tree(name)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & VERBS, f"{name} defines catalog verbs {sorted(defined & VERBS)}"
    for node in ast.walk(tree):  # schema.build("runs", ...) / append("runs", ...): a run made here
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("build", "append") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("runs", "episodes"):
            pytest.fail(f"{name}:{node.lineno} writes {node.args[0].value} rows")


def test_the_catalog_uses_only_the_engines_public_methods():
    used = {n.attr for n in ast.walk(_tree("catalog.py")) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Attribute) and n.value.attr == "store"}
    assert used and not {u for u in used if u.startswith("_")}
    assert {"append", "read", "row_count", "rewrite_rows"} >= used - {"path"}


def test_the_catalog_and_the_store_add_find_label_and_delete_runs_alike(tmp_path):
    st = rlarrow.Store.create(tmp_path / "s")
    catalog = st.catalog
    assert isinstance(catalog, Catalog)
    a = catalog.add_run(source="user", run_id="a", name="A", metadata={"seed": np.int64(1)})
    b = st.add_run(source="user")
    assert len(b) == len(new_run_id()) == 22 and st.has_run(a) and catalog.has_run(b)
    with pytest.raises(StoreError, match="'a' already exists"):
        st.add_run(source="user", run_id="a")
    with st.transaction():
        st.add_run(source="user", run_id="c")
        assert st.has_run("c")  # the transaction's own rows are read back
    def rolled_back() -> None:
        with st.transaction():
            st.add_run(source="user", run_id="d")
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert not st.has_run("d") and sorted(st.runs().column("run_id").to_pylist()) == sorted([a, b, "c"])
    st.append("episodes", {"run_id": "a", "episode_id": [0, 1], "num_steps": [5, 9], "env_index": 0,
                           "terminated": True, "truncated": False, "partial_start": False,
                           "partial_end": False})
    assert st.label({"split": "val"}, episodes=[("a", 1)]) == {"episodes": 1}
    assert [m and '"val"' in m for m in catalog.episodes("a").column("metadata").to_pylist()] == [None, True]
    with pytest.raises(NotFoundError, match="no runs matched"):
        catalog.label({"x": 1}, runs=["nope"])
    with pytest.raises(ArgumentError, match="not both"):
        catalog.label({"x": 1}, runs=["a"], episodes=[("a", 0)])
    assert catalog.delete(runs="a") == {"runs": 1, "episodes": 2}
    assert not st.has_run("a") and st.catalog.episodes().num_rows == 0


def test_a_selection_masks_rows_by_run_and_episode():
    import pyarrow as pa

    keys = pa.table({"run_id": ["a", "a", "b", "c"], "episode_id": [0, 1, 1, 0]})
    assert Selection(["c"], [("a", 1)]).mask(keys).tolist() == [False, True, False, True]
    assert Selection(["c"], None).applies(["run_id"]) and not Selection(None, [("a", 1)]).applies(["run_id"])
    with pytest.raises(ArgumentError, match="nothing selected"):
        Selection(None, None)

"""`import rlarrow` stays light; a feature whose extra is missing names the pip command."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEAVY = ["torch", "tensorboard", "dm_env", "envlogger", "matplotlib", "tensorflow", "ray"]


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_import_and_store_use_import_no_optional_dependency(tmp_path):
    out = run(f"""
        import sys, numpy as np
        import rlarrow
        s = rlarrow.Store.create({str(tmp_path / 's')!r})
        s.append("scalars", {{"run_id": "r", "scope": "t", "tag": "x", "step": [1], "value": [1.0]}})
        s.info(); s.read("scalars")
        from rlarrow.cli.commands import main
        from rlarrow.core.remote import RemoteStore
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_bare_import_is_lazy():
    out = run("""
        import sys, rlarrow
        print(sorted(m for m in ["duckdb", "polars", "pyarrow", "numpy"] if m in sys.modules))
    """)
    assert out.stdout.strip() == "[]", "import rlarrow should defer its heavy dependencies"


BLOCKER = """
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == {name!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Block())
"""


@pytest.mark.parametrize(("module", "extra"), [("torch", "torch"), ("tensorboard", "tensorboard"),
                                               ("dm_env", "dm-env"), ("envlogger", "envlogger"),
                                               ("matplotlib", "plot"), ("ray", "ray")])
def test_missing_extra_names_the_install_command(module, extra):
    out = run(BLOCKER.format(name=module) + f"""
    import rlarrow
    from rlarrow.core.deps import require
    try:
        require({module!r})
    except rlarrow.MissingDependencyError as exc:
        assert isinstance(exc, ModuleNotFoundError)
        print(exc)
    """)
    assert out.returncode == 0, out.stderr
    assert f"pip install 'rlarrow[{extra}]'" in out.stdout


def test_the_pyarrow_floor_reads_null_fixed_size_lists_back(tmp_path):
    """pyproject's pyarrow floor is the first release that reads back a Parquet fixed-size list
    column holding a null (17 to 25.0.1 raise "Expected all lists to be of size=4"): every store
    with vector actions holds one, the null action of each episode's last step."""
    import re
    import tomllib

    import pyarrow as pa
    import pyarrow.parquet as pq

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    floor = next(d for d in project["project"]["dependencies"] if d.startswith("pyarrow"))
    assert int(re.search(r">=\s*(\d+)", floor).group(1)) >= 26
    action = pa.FixedSizeListArray.from_arrays(pa.array(range(8), pa.float32()), 4,
                                               mask=pa.array([False, True]))
    pq.write_table(pa.table({"action": action}), tmp_path / "a.parquet")
    assert pq.read_table(tmp_path / "a.parquet").column("action").to_pylist() == [[0, 1, 2, 3], None]

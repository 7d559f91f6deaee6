"""Dict observations are stored in one field order, whatever the process's hash seed.

envlogger decodes dicts from protobuf maps, whose order changes from process to process
(``PYTHONHASHSEED``): imports of one directory used to fix a different struct order in each
process, and a second import or recording into the same store then failed with "the store
already fixed other types". The documented order (docs/format.md, "Field order"): the
spec's or space's order for recordings and Minari imports, sorted for envlogger imports, and
a store that holds the same fields in another order keeps its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from test_episodes import HAVE_DM_ENV, _envlogger_loads

import rlarrow

pytestmark = pytest.mark.skipif(not HAVE_DM_ENV or not _envlogger_loads(),
                                reason="needs dm_env and envlogger 1.2 (test-only peers): "
                                       "pip install 'envlogger<1.3' dm-env")

ENV = textwrap.dedent('''
    import numpy as np, dm_env
    from dm_env import specs

    class Robot(dm_env.Environment):
        """A dict observation whose spec is not in sorted order (at both levels)."""

        def __init__(self):
            self.t = 0

        def _obs(self):
            return {"frame": np.full((6, 4), self.t, np.uint8),
                    "proprio": {"pos": np.array([self.t, -self.t], np.float64),
                                "flag": np.array(self.t % 2 == 0)}}

        def reset(self):
            self.t = 0
            return dm_env.restart(self._obs())

        def step(self, action):
            self.t += 1
            return (dm_env.termination if self.t == 3 else dm_env.transition)(0.5, self._obs())

        def observation_spec(self):
            return {"frame": specs.Array((6, 4), np.uint8, "frame"),
                    "proprio": {"pos": specs.Array((2,), np.float64, "pos"),
                                "flag": specs.Array((), bool, "flag")}}

        def action_spec(self):
            return specs.DiscreteArray(3, name="action")

    def play(env, episodes=2):
        for _ in range(episodes):
            ts = env.reset()
            while not ts.last():
                ts = env.step(1)
''')

WORK = textwrap.dedent('''
    import sys
    import numpy as np
    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_
    import envlogger, rlarrow
    from rlarrow.io.envlogger import export_envlogger, import_envlogger
    from robot_env import Robot, play

    logs, store, out = sys.argv[1], sys.argv[2], sys.argv[3]
    import_envlogger(logs, store, progress=False)            # envlogger's order: the hash seed's
    with rlarrow.EnvLogger(Robot(), store) as env:           # the spec's order
        play(env)
    rid = rlarrow.Store.open(store).runs().to_pylist()[-1]["run_id"]
    export_envlogger(store, out, run_id=rid)                 # and back again
    import_envlogger(out, store, progress=False)
''')


def _field_names(type_):
    return [(f.name, _field_names(f.type)) if pa.types.is_struct(f.type) else f.name for f in type_]


def _logs(tmp_path):
    """An envlogger directory of the Robot env, written by envlogger itself."""
    (tmp_path / "robot_env.py").write_text(ENV)
    logs = tmp_path / "logs"
    logs.mkdir()
    code = textwrap.dedent('''
        import sys
        import numpy as np
        np.unicode_ = np.str_
        import envlogger
        from robot_env import Robot, play
        with envlogger.EnvLogger(Robot(), data_directory=sys.argv[1]) as env:
            play(env, 3)
    ''')
    subprocess.run([sys.executable, "-c", code, str(logs)], cwd=tmp_path, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(tmp_path)})
    return logs


SORTED = ["frame", ("proprio", ["flag", "pos"])]
SPEC_ORDER = ["frame", ("proprio", ["pos", "flag"])]


@pytest.mark.slow
def test_imports_and_recordings_under_several_hash_seeds_share_one_store(tmp_path):
    logs = _logs(tmp_path)
    store = tmp_path / "s"
    (tmp_path / "work.py").write_text(WORK)
    for seed in ("0", "1", "2", "123"):
        args = [sys.executable, "work.py", str(logs), str(store), str(tmp_path / f"out{seed}")]
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(tmp_path)})
        assert done.returncode == 0, f"PYTHONHASHSEED={seed}: {done.stderr[-3000:]}"
    st = rlarrow.Store.open(store)
    assert len(st.runs()) == 4 * 3
    # the first writer was an envlogger import: sorted at every level; everyone after kept it
    assert _field_names(st.schema("steps").field("observation").type) == SORTED
    steps = st.read("steps")
    assert steps.num_rows == 4 * (3 * 4 + 2 * 4 + 2 * 4)
    frames = rlarrow.core.tensors.to_numpy(steps.column("observation"))["frame"]
    assert frames.shape == (steps.num_rows, 6, 4)


def test_a_recording_fixes_the_spec_order_and_imports_keep_it(tmp_path):
    from rlarrow.io.envlogger import export_envlogger, import_envlogger

    logs = _logs(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        from robot_env import Robot, play
    finally:
        sys.path.remove(str(tmp_path))
    with rlarrow.EnvLogger(Robot(), tmp_path / "s") as env:
        play(env)
    report = import_envlogger(logs, tmp_path / "s", progress=False)
    st = rlarrow.Store.open(tmp_path / "s")
    assert _field_names(st.schema("steps").field("observation").type) == SPEC_ORDER
    with rlarrow.Reader(st, run_id=report.run_id) as reader:
        obs = reader.episodes[2][3].timestep.observation
        assert obs["proprio"]["pos"].tolist() == [3.0, -3.0] and obs["frame"].dtype == np.uint8
    # an envlogger import into a new store: sorted
    import_envlogger(logs, tmp_path / "t", progress=False)
    fixed = rlarrow.Store.open(tmp_path / "t").schema("steps").field("observation").type
    assert _field_names(fixed) == SORTED
    # and a store fixed by an export's import takes recordings of either order
    export_envlogger(tmp_path / "t", tmp_path / "back")
    import_envlogger(tmp_path / "back", tmp_path / "t", progress=False)
    with rlarrow.EnvLogger(Robot(), tmp_path / "t") as env:
        play(env)
    assert len(rlarrow.Store.open(tmp_path / "t").runs()) == 3


def test_fields_that_differ_in_more_than_order_start_a_layout(tmp_path):
    from rlarrow.core.step_columns import declare_steps, same_fields

    a = pa.struct([("x", pa.float32()), ("y", pa.struct([("p", pa.int64()), ("q", pa.bool_())]))])
    b = pa.struct([("y", pa.struct([("q", pa.bool_()), ("p", pa.int64())])), ("x", pa.float32())])
    c = pa.struct([("y", pa.struct([("q", pa.bool_()), ("p", pa.int32())])), ("x", pa.float32())])
    assert same_fields(a, b) and not same_fields(a, c) and not same_fields(a, pa.float32())
    st = rlarrow.Store.create(tmp_path / "s")
    assert declare_steps(st, {"observation": a, "action": pa.int64()})["observation"] == a
    assert declare_steps(st, {"observation": b, "action": pa.int64()})["observation"] == a
    assert declare_steps(st, {"observation": c, "action": pa.int64()})["observation"] == c
    assert [info.schema.field("observation").type for info in st.layouts("steps")] == [a, c]
    assert declare_steps(st, {"observation": b, "action": pa.int64()})["observation"] == a

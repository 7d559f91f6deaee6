from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

import rlarrow

REPO = Path(__file__).resolve().parents[1]
#: Files written by the real peer tools (skrl, envlogger, Minari, torch, tianshou, tensorboardX),
#: committed with the tests so that a clone proves what CI proves; tests/fixtures/README.md says
#: how each was made.
FIXTURES = REPO / "tests" / "fixtures"

# the record of Parquet files checked whole (rlarrow.core.store.checked) kept for this run only,
# in subprocesses too, never in the user's cache
if "RLARROW_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["RLARROW_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlarrow-test-cache-")


def run_python_blocks(rel: str) -> int:
    """Run the ```python blocks of a Markdown file of the repository, in order, in one namespace.

    Returns how many ran (the caller chdirs to a scratch directory first).
    """
    import re

    blocks = re.findall(r"```python\n(.*?)```", (REPO / rel).read_text(), re.S)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, rel, "exec"), namespace)  # noqa: S102
    return len(blocks)


def episode_columns(run_id: str, episode_id: int, length: int, *, env_index: int = 0,
                    seed: int = 0, image: bool = True) -> dict:
    """Steps of one episode in RLDS alignment: `length` actions, length + 1 steps."""
    rng = np.random.default_rng(seed + 1000 * episode_id)
    n = length + 1
    obs = {
        "position": rng.standard_normal((n, 3)).astype(np.float32),
        "grid": rng.integers(0, 255, (n, 4, 5), dtype=np.uint8) if image
        else np.zeros((n, 1), np.uint8),
    }
    actions = [rng.integers(0, 3, 2).astype(np.int64) for _ in range(length)] + [None]
    rewards = [float(x) for x in rng.standard_normal(length)] + [None]
    terminal = [False] * length + [True]
    return {
        "run_id": run_id,
        "episode_id": episode_id,
        "step": np.arange(n),
        "env_index": env_index,
        "observation": obs,
        "action": actions,
        "reward": rewards,
        "discount": [1.0] * (length - 1) + [0.0, None],
        "is_first": [True] + [False] * length,
        "is_last": [False] * length + [True],
        "is_terminal": terminal,
        "metadata": [{"t": i, "info": {"x": np.float32(i / 2)}} for i in range(n)],
    }


def populate(store: rlarrow.Store, *, episodes: int = 3, length: int = 5) -> str:
    """Write one run with episodes, steps, scalars and a memory snapshot."""
    run = store.add_run(
        source="test",
        name="populate",
        num_envs=2,
        metadata={"env": "grid", "params": {"lr": np.float64(3e-4), "gamma": np.float32(0.99)},
                  "tags": ["a", "b"], "seed": 7},
        env_specs={"observation": {"shape": (3,), "dtype": "float32"}},
    )
    for e in range(episodes):
        store.append("steps", episode_columns(run, e, length, env_index=e % 2))
    store.append("episodes", {
        "run_id": run,
        "episode_id": np.arange(episodes),
        "env_index": np.arange(episodes) % 2,
        "num_steps": np.full(episodes, length + 1),
        "return": np.linspace(-1, 1, episodes),
        "terminated": np.ones(episodes, bool),
        "truncated": np.zeros(episodes, bool),
        "partial_start": np.zeros(episodes, bool),
        "partial_end": np.zeros(episodes, bool),
        "metadata": [{"episode_return": np.float64(r)} for r in np.linspace(-1, 1, episodes)],
    })
    steps = np.arange(10)
    store.append("scalars", {
        "run_id": run, "scope": "train", "tag": "train/loss", "step": steps,
        "value": 1.0 / (steps + 1), "wall_time": 1.7e9 + steps, "encoding": "simple_value",
        "dtype": "float32",
    })
    memory_size, num_envs = 4, 2
    idx = np.arange(memory_size * num_envs)
    store.append("memory", {
        "run_id": run, "snapshot_id": 0, "snapshot_name": "memory_0",
        "memory_index": idx // num_envs, "env_index": idx % num_envs,
        "memory_size": memory_size, "num_envs": num_envs, "is_full": True,
        "write_pointer": 0, "env_pointer": 0, "filled": True,
        "states": np.arange(memory_size * num_envs * 3, dtype=np.float32).reshape(-1, 3),
        "terminated": np.zeros((memory_size * num_envs, 1), bool),
    })
    store.append("sources", {
        "run_id": run, "snapshot_id": [0, None], "format": ["pt", "tfevents"],
        "path": ["/data/memory_0.pt", "/data/events.out.tfevents.1"], "sha256": ["a" * 64, "b" * 64],
        "bytes": [4096, 512], "imported_at": [datetime(2026, 1, 1, tzinfo=UTC)] * 2,
    })
    return run


@pytest.fixture
def store(tmp_path: Path) -> rlarrow.Store:
    with rlarrow.Store.create(tmp_path / "store") as s:
        yield s


@pytest.fixture
def populated(store: rlarrow.Store) -> rlarrow.Store:
    populate(store)
    return store


@pytest.fixture
def clean_env() -> dict[str, str]:
    """Environment for subprocesses: the same Python, no inherited coverage hooks."""
    env = dict(os.environ)
    env.pop("PYTHONSTARTUP", None)
    return env


def assert_delta_current(store: rlarrow.Store) -> None:
    """Every table's Delta log lists exactly the store's committed files, in row order.

    Read with rlarrow's own log reader always, and with ``deltalake`` (another engine's
    reading of the same log) where it is installed.
    """
    from rlarrow.core.store.delta import DeltaLog

    m = store.manifest()
    for name, entry in m["tables"].items():
        log = DeltaLog(store.path / name)
        log.refresh()
        if log.version < 0:
            assert not entry["files"], f"{name}: files committed but no Delta log"
            continue
        assert [f.name for f in log.ordered()] == [f["name"] for f in entry["files"]], name
        assert [f.rows for f in log.ordered()] == [f["rows"] for f in entry["files"]], name
        assert log.store_version <= m.get("version", 0)
        try:
            import deltalake
        except ImportError:
            continue
        table = deltalake.DeltaTable(os.fspath(store.path / name))
        assert table.version() == log.version
        listed = sorted(os.path.basename(u) for u in table.file_uris())
        assert listed == sorted(f["name"] for f in entry["files"])


def add_video_row(store: rlarrow.Store, run_id: str = "camera-run") -> None:
    """One ``videos`` row: a 3-frame stream of a run of its own (needs PyAV)."""
    from rlarrow.core import schema as _schema
    from rlarrow.core.video import encode_frames, video_row

    frames = np.zeros((3, 8, 8, 3), np.uint8)
    frames[..., 1] = np.array([30, 120, 210], np.uint8)[:, None, None]
    row = video_row(run_id, 0, 0, "observation.camera", encode_frames(frames, fps=10), [0, 1, 2])
    store.append("videos", _schema.build("videos", row, num_rows=1))


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (moto's server mode, ``tests/s3_server.py``) for this pytest process.

    Started on first use on 127.0.0.1 on a free port, with credentials of its own and a fresh
    bucket, and stopped at the end of the session. Under pytest-xdist each worker that runs an
    object-storage test starts its own (``--dist loadfile`` keeps a file's tests on one worker).
    """
    import s3_server as _s3

    if _s3.moto_server_command() is None:
        pytest.skip("needs moto's S3 server (moto[server], in the dev extra): pip install -e '.[dev]'")
    server = _s3.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch, request):
    """The S3 server with the standard AWS variables set for this test, and a prefix of its own.

    ``s3.prefix`` is ``s3://BUCKET/<test name>-<random>``: tests never see each other's objects.
    """
    import re
    import secrets

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:60]
    s3_server.prefix = f"s3://{s3_server.bucket}/{name}-{secrets.token_hex(3)}"
    return s3_server

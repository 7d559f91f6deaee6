"""Nothing written outside a target: a URI given where rlarrow writes locally is refused, and nothing is made.

``Path("s3://bucket/x")`` is the local path ``s3:/bucket/x``: before these refusals,
``rlarrow convert ... -o s3://bucket/x`` created a directory named ``s3:`` in the current
directory. Until a store on object storage is writable, every entry point that writes (or opens
a store to write) says so, and how to get the data there today: write locally, then
``rlarrow push``. Each test runs in an empty current directory and asserts it stays empty.
"""

from __future__ import annotations

import glob
import os

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, populate

import rlarrow
from rlarrow.core.errors import OutputError, StoreError

SCHEMES = ["s3", "gs", "az", "hf"]


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    """An empty current directory; the test asserts it is still empty at the end."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield cwd
    assert sorted(os.listdir(cwd)) == [], "something was written locally for a URI target"


def _says_how(message: str, uri: str) -> None:
    scheme = uri.split("://")[0]
    assert message.startswith(uri + ":"), message
    assert "object storage" in message and "yet" in message, message
    assert f"no local directory '{scheme}:'" in message, message


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_store_at_a_uri_is_refused_and_nothing_is_created(scheme, empty_cwd):
    uri = f"{scheme}://bucket/runs.rlarrow"
    for call in (lambda: rlarrow.Store.create(uri), lambda: rlarrow.Store.create(uri, exist_ok=True),
                 lambda: rlarrow.Store.open(uri, create=True)):
        with pytest.raises(StoreError) as caught:
            call()
        _says_how(str(caught.value), uri)
        assert f"rlarrow push LOCAL_STORE {uri}" in str(caught.value)
    # (the readers of a pushed store take the URI: rlarrow.connect(uri), sql, scan, Reader, ...)
    for call in (lambda: rlarrow.Store.open(uri), lambda: rlarrow.Store(uri, readonly=True)):
        with pytest.raises(StoreError, match=r"RemoteStore\('" + scheme) as caught:
            call()
        _says_how(str(caught.value), uri)


def test_a_file_uri_is_told_to_give_the_path(empty_cwd):
    with pytest.raises(StoreError, match=r"give its path \('/tmp/x.rlarrow'\)"):
        rlarrow.Store.create("file:///tmp/x.rlarrow")


def test_a_local_path_that_only_looks_like_a_scheme_is_a_path(empty_cwd):
    with rlarrow.Store.create("s3:bucket") as st:  # (no "//": a local directory of that name)
        assert st.row_count("steps") == 0
    import shutil

    shutil.rmtree("s3:bucket")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_recorders_given_a_uri_are_refused(scheme, empty_cwd):
    import gymnasium as gym

    from rlarrow.record.gym import RecordEpisodes, RecordVectorEpisodes
    from rlarrow.record.logger import ArrowLogger, SummaryWriter

    uri = f"{scheme}://bucket/rec.rlarrow"
    for make in (lambda: ArrowLogger(uri), lambda: SummaryWriter(uri),
                 lambda: RecordEpisodes(gym.make("CartPole-v1"), uri),
                 lambda: RecordVectorEpisodes(gym.make_vec("CartPole-v1", num_envs=2), uri)):
        with pytest.raises(StoreError) as caught:
            make()
        _says_how(str(caught.value), uri)
    # event files mirrored to a URI: refused before the (local) store is even made
    with pytest.raises(OutputError) as caught:
        SummaryWriter("local.rlarrow", log_dir=f"{scheme}://bucket/tb")
    _says_how(str(caught.value), f"{scheme}://bucket/tb")


def test_envlogger_given_a_uri_is_refused(empty_cwd):
    dm_env = pytest.importorskip("dm_env", reason="rlarrow.EnvLogger needs dm_env (the dm-env extra)")
    import numpy as np
    from dm_env import specs

    class Still(dm_env.Environment):
        def reset(self):
            return dm_env.restart(np.zeros(2, np.float32))

        def step(self, action):
            return dm_env.termination(1.0, np.zeros(2, np.float32))

        def observation_spec(self):
            return specs.Array((2,), np.float32)

        def action_spec(self):
            return specs.DiscreteArray(2)

    with pytest.raises(StoreError) as caught:
        rlarrow.EnvLogger(Still(), "s3://bucket/env.rlarrow")
    _says_how(str(caught.value), "s3://bucket/env.rlarrow")


def _cli(*args: str):
    from rlarrow.cli.commands import cli

    return CliRunner().invoke(cli, list(args))


def test_convert_to_a_uri_is_refused_and_makes_no_s3_directory(empty_cwd):
    memory = sorted(glob.glob(str(FIXTURES / "skrl" / "**" / "*.pt"), recursive=True))[0]
    out = _cli("convert", memory, "-o", "s3://bucket/x")
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output and "rlarrow push LOCAL_STORE s3://bucket/x" in out.output
    message = out.output.partition("Error: ")[2].strip().replace("\n", " ")
    _says_how(message, "s3://bucket/x")
    minari = FIXTURES / "minari" / "cartpole" / "arrow-v0"
    out = _cli("convert", str(minari), "--to", "rlds", "-o", "gs://bucket/rlds")
    assert out.exit_code == 1 and "object storage (gs://) yet" in out.output, out.output


def test_every_export_to_a_uri_is_refused(empty_cwd, tmp_path):
    from rlarrow.io import registry

    with rlarrow.Store.create(tmp_path / "local.rlarrow") as st:
        populate(st)
    for target in registry.exporters():
        uri = f"s3://bucket/out-{target.name}"
        with pytest.raises(OutputError) as caught:
            target.export(st.path, uri, run_id=None, overwrite=False)
        _says_how(str(caught.value), uri)
        out = _cli("export", str(st.path), "-o", uri, "--format", target.name)
        assert out.exit_code == 1 and "object storage (s3://) yet" in out.output, (target.name, out.output)
    out = _cli("sql", str(st.path), "select 1 as x", "-o", "s3://bucket/q.parquet")
    assert out.exit_code == 1 and "object storage (s3://) yet" in out.output, out.output

"""README code blocks run as tests (every module's docstring examples: tests/test_doctests.py)."""

from __future__ import annotations

import re

from conftest import REPO, run_python_blocks

import rlarrow

README = (REPO / "README.md").read_text()


def test_readme_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_python_blocks("README.md") >= 2
    out = capsys.readouterr().out
    assert "4 100" in out  # the row counts the first block prints
    assert "cartpole-ppo" in out and "0.0003" in out
    assert "dqn {'training/env_step': [[1000, 1000], [2000, 2000]]}" in out
    assert "0 (4, 4) [ 1.  1.  1. nan]" in out
    assert out.count("torch.Size([2, 4]) torch.Size([2, 4]) tensor([") == 2  # 3 transitions, 2 epochs


def test_readme_quickstart_has_exactly_the_two_commands():
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    sh = re.findall(r"```sh\n(.*?)```", quickstart, re.S)
    commands = [line.split("#")[0].strip() for block in sh for line in block.splitlines()]
    assert [c for c in commands if c] == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci


def test_version_is_in_one_place():
    text = (REPO / "rlarrow" / "_version.py").read_text()
    assert rlarrow.__version__ in text

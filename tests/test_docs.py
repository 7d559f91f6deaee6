"""README code blocks run as tests (every module's docstring examples: tests/test_doctests.py)."""

from __future__ import annotations

import re

from conftest import REPO, run_python_blocks

import rlarrow

README = (REPO / "README.md").read_text()


def test_readme_tour_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_python_blocks("README.md") == 4  # record, query (any engine, rlarrow's SQL), stream
    out = capsys.readouterr().out
    assert "4 100" in out  # the row counts the first block prints
    assert "cartpole-ppo" in out and "0.0003" in out
    assert "0 (4, 4) [ 1.  1.  1. nan]" in out
    assert out.count("torch.Size([2, 4]) torch.Size([2, 4]) tensor([") == 2  # 3 transitions, 2 epochs


def test_user_guide_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_python_blocks("docs/guide.md") >= 8
    out = capsys.readouterr().out
    assert "4 100" in out
    assert "cartpole-ppo" in out and "0.0003" in out
    assert "dqn {'training/env_step': [[1000, 1000], [2000, 2000]]}" in out
    assert "0 (4, 4) [ 1.  1.  1. nan]" in out
    assert out.count("torch.Size([2, 4]) torch.Size([2, 4]) tensor([") == 2


def test_readme_is_a_front_page_whose_links_resolve():
    """What it is, the two commands, the tour, the formats table, links; history in CHANGELOG.md."""
    sections = re.findall(r"^## (.+)$", README, re.M)
    assert sections[:3] == ["Quickstart", "A short tour", "Formats in and out"]
    for name in ("pt", "Minari", "D4RL", "robomimic", "RLDS", "LeRobot", "TensorBoard", "envlogger"):
        assert re.search(rf"^\| [^|]*{name}", README, re.M), f"the formats table lost {name}"
    assert "## Status" not in README and "### Added:" in (REPO / "CHANGELOG.md").read_text()
    docs = (p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
    pages = ["README.md", "CHANGELOG.md", *docs]
    for page in pages:
        text = (REPO / page).read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert ((REPO / page).parent / target).exists(), f"{page} links to {target}, which is not there"


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


def test_api_reference_names_modules_that_exist():
    """A module moved without its reference page fails here, before `make docs` (mkdocs --strict) in CI."""
    import importlib.util

    pages = sorted((REPO / "docs" / "api").glob("*.md"))
    names = [n for p in pages for n in re.findall(r"^::: ([\w.]+)", p.read_text(), re.M)]
    assert len(names) >= 20
    assert [n for n in names if importlib.util.find_spec(n) is None] == []
    config = (REPO / "mkdocs.yml").read_text()
    for p in pages:
        assert f"api/{p.name}" in config, f"{p.name} is not in mkdocs.yml's nav"
    assert "make docs" in (REPO / ".ci" / "run").read_text()

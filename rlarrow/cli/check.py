"""``rlarrow check``: the data doctor on the command line (:mod:`rlarrow.query.doctor`).

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Examples (from a shell)::

    rlarrow check runs.rlarrow                       # every check; exit 1 on errors
    rlarrow check runs.rlarrow --only alignment,gaps --json
    rlarrow check runs.rlarrow --fix                 # add missing runs/episodes rows, one commit
    rlarrow check runs/PPO_cartpole/memories/x.npz   # an export: converted, checked, deleted

Example:
    >>> from click.testing import CliRunner
    >>> result = CliRunner().invoke(check, ["--help"])
    >>> result.exit_code, "--spike-sigma" in result.output
    (0, True)
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from rlarrow.cli.commands import cli_spelling, friendly_errors

__all__: list[str] = []

#: The checks ``--only`` takes (those of :data:`rlarrow.query.doctor.CHECKS`, named here so that
#: ``rlarrow --help`` does not import DuckDB, NumPy and pyarrow; a test keeps the two equal).
CHECK_NAMES = ("alignment", "duplicates", "references", "gaps", "monotonic", "nonfinite", "frozen", "spikes",
               "short_episodes", "memory", "null_observations", "export_cuts", "reset_rows", "time_limit",
               "empty_imports", "interleaved")



def _only(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str] | None:
    """``--only a --only b,c`` as ``["a", "b", "c"]``; an unknown name is a usage error (exit 2)."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: choose from {', '.join(CHECK_NAMES)}", ctx, param)
    return names or None


def _is_store(path: str) -> bool:
    from rlarrow.core.store import MANIFEST_NAME

    # (lexists: a manifest that is a link is a store's, refused by Store.open, never looked through)
    return os.path.lexists(os.path.join(path, MANIFEST_NAME))


@click.command("check")
@click.argument("source", metavar="STORE_OR_INPUT", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON instead of one line per finding.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Also write the JSON report to this file.")
@click.option("--min-length", type=click.IntRange(min=1), default=2, show_default=True,
              help="Report episodes of fewer steps than this (2: the 1-step episodes).")
@click.option("--frozen-steps", type=click.IntRange(min=1), default=50, show_default=True,
              help="Report one observation repeated for more consecutive steps than this.")
@click.option("--spike-sigma", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Report action elements this many standard deviations from their mean.")
@click.option("--max-episode-steps", type=click.IntRange(min=1), metavar="N",
              help="The env's time limit: report episodes longer (joined across it). Default: the limit a "
                   "convert recorded in the episodes' metadata.")
@click.option("--layout", type=click.IntRange(min=1), metavar="N",
              help="Check the observations and actions of steps layout N only (a store of runs whose "
                   "tensors differ, PPO and DQN, has several: `rlarrow info` lists them). The episode, "
                   "run and reference checks cover every run.")
@click.option("--only", "only", multiple=True, metavar="CHECK", callback=_only,
              help=f"Run only this check (repeatable, or comma-separated): {', '.join(CHECK_NAMES)}.")
@click.option("--max-lines", type=click.IntRange(min=0), default=50, show_default=True,
              help="Findings printed (the summary counts them all; --json and -o list them all).")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option("--fix", is_flag=True,
              help="Add the runs and episodes rows the references check finds missing (episodes rows "
                   "derived from their steps), in one commit, then check again; print the delete/label "
                   "commands for the rest. Nothing is deleted or rewritten. Stores only.")
@friendly_errors
def check(source: str, as_json: bool, output: str | None, min_length: int, frozen_steps: int,
          spike_sigma: float, max_episode_steps: int | None, layout: int | None, only: list[str] | None,
          max_lines: int, strict: bool, fix: bool) -> None:
    """Check STORE_OR_INPUT for what training would otherwise find.

    Bad alignment flags, duplicate or missing rows, gaps, NaN and inf, frozen observations,
    action spikes, 1-step episodes, replay memories whose pointers disagree with their rows,
    null observations inside episodes, episodes of memory exports cut at an export's edge or
    starting with an autoreset row, episodes joined across a time limit, imports that gave no
    rows, and one-env memories whose rows are several envs interleaved.

    STORE_OR_INPUT is a store, or anything `rlarrow convert` reads (an skrl memory export, an
    experiment directory, ...): it is converted into a temporary store (with --episodes),
    checked, and the temporary store deleted.

    With --fix (a store only), what needs no guess and loses no data is fixed in one commit
    (one new store version): a runs row for each run id that has data but no runs row, and
    an episodes row for each episode of steps without one (num_steps, return and flags from
    its steps). Nothing is deleted or rewritten: for everything else (NaN, frozen or short
    episodes, bad flags, episodes rows that disagree with their steps, ...) the report names
    the `rlarrow delete` and `rlarrow label` commands that would deal with it. The checks
    then run again, and the exit status is that of what remains.

    Exit status: 0 when no errors were found (warnings alone: 0, unless --strict), 1 when
    errors were found (or the store could not be read), 2 for a usage error (--fix of an
    input that is not a store included).

    \b
    Examples:
        rlarrow check runs.rlarrow
        rlarrow check runs.rlarrow --only alignment,gaps --json -o report.json
        rlarrow check runs/PPO_cartpole/memories/26-11-22_memory.npz
        rlarrow check runs.rlarrow --fix
    """  # noqa: D301 (click keeps a paragraph after a backspace character, \b, as it is)
    from rlarrow.query.doctor import check_store, fix_store, fixable

    options: dict[str, Any] = {"min_length": min_length, "frozen_steps": frozen_steps,
                               "spike_sigma": spike_sigma, "checks": only,
                               "max_episode_steps": max_episode_steps, "layout": layout}
    converted: list[str] | None = None
    is_store = _is_store(source)
    if fix and not is_store:
        raise click.UsageError(f"--fix changes a store, and {source} is not one (it would be checked as a "
                               "temporary conversion, deleted afterwards): convert it first "
                               f"(rlarrow convert {shlex.quote(source)} STORE), then run "
                               "rlarrow check STORE --fix")
    if is_store:
        report = check_store(source, **options)
    else:
        report, converted = _check_converted(source, options)
    repaired = fix_store(source, report, name=source) if fix else None
    final = report if repaired is None else repaired.remaining
    data = final.to_dict()
    data["store"] = os.fspath(source)
    if converted is not None:
        data["converted"] = converted
    if repaired is not None:
        data["fix"] = {k: v for k, v in repaired.to_dict().items() if k not in ("store", "fixed", "hints")}
        data["fixed"] = [f.to_dict() for f in repaired.fixed]
        data["hints"] = [h.to_dict() for h in repaired.hints]
    if output:
        Path(output).write_text(json.dumps(data, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        if repaired is not None:
            for fixed in repaired.fixed[:max_lines]:
                click.echo(f"fixed: {fixed}")
            added = sum(repaired.added.values())
            if added > min(len(repaired.fixed), max_lines):
                click.echo(f"... {added - min(len(repaired.fixed), max_lines)} more row(s) added, not shown")
        shown = final.findings[:max_lines]
        for finding in shown:
            click.echo(str(finding))
        found = final.errors + final.warnings
        if found > len(shown):
            click.echo(f"... {found - len(shown)} more finding(s) not shown "
                       "(--max-lines N; --json lists them)")
        if repaired is not None and repaired.hints:
            click.echo("not fixed automatically (nothing was deleted):")
            for hint in repaired.hints:
                click.echo("\n".join(f"  {line}" for line in str(hint).splitlines()))
        if repaired is not None:
            click.echo(f"{source}: {repaired.summary()}; now: {final.summary()}")
        else:
            n = fixable(report) if is_store else 0
            if n:
                click.echo(f"{n} of these (missing runs or episodes rows) can be added safely: "
                           f"rlarrow check {shlex.quote(source)} --fix")
            click.echo(f"{source}: {report.summary()}")
    if not final.ok or (strict and final.warnings):
        click.get_current_context().exit(1)


def _check_converted(source: str, options: dict[str, Any]) -> tuple[Any, list[str]]:
    """Convert ``source`` as `rlarrow convert --episodes` does into a temporary store, check it, delete it.

    Returns the report and the conversion's report lines.
    """
    from rlarrow.core.errors import InvalidInputError, UnsupportedInputError
    from rlarrow.io.importing import import_paths
    from rlarrow.query.doctor import check_store

    directory = tempfile.mkdtemp(prefix="rlarrow-check-")
    try:
        store = os.path.join(directory, "store.rlarrow")
        try:  # the convert command's call, with its defaults and --episodes
            try:
                imported = import_paths([source], store, run_id=None, name=None, again=False, episodes=True,
                                        names=None, autoreset=None, skip_corrupt=False, num_envs=None,
                                        memory_size=None, dtype="float32", layout="binary")
            except InvalidInputError as exc:
                if "does not record num_envs" not in str(exc):
                    raise
                # a csv export: its memory is checked, unrolled into no episodes (num_envs unknown)
                imported = import_paths([source], store, episodes=False, progress=False)
        except UnsupportedInputError as exc:
            raise click.BadParameter("not a store (it has no _rlarrow_store.json), and not an input rlarrow "
                                     f"convert reads: {cli_spelling(str(exc))}",
                                     param_hint="STORE_OR_INPUT") from exc
        lines = cli_spelling(str(imported)).splitlines()
        click.echo(f"{source}: not a store; checking a temporary conversion of it (deleted afterwards):",
                   err=True)
        for line in lines:
            click.echo(f"  {line}", err=True)
        return check_store(store, **options), lines
    finally:
        shutil.rmtree(directory, ignore_errors=True)

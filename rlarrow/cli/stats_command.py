"""``rlarrow stats``: a store's normalisation statistics as LeRobot's ``stats.json``.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

The command line of :mod:`rlarrow.query.dataset_stats`.

Examples (from a shell)::

    rlarrow stats runs.rlarrow                                   # every episode, printed
    rlarrow stats runs.rlarrow --where "metadata->>'split' = 'train'" -o stats.json
    rlarrow stats runs.rlarrow --weight RUN_A=0.7 --weight RUN_B=0.3 -o mixture.json
    rlarrow stats runs.rlarrow --column action --no-quantiles    # moments only, fastest

Example:
    >>> from click.testing import CliRunner
    >>> result = CliRunner().invoke(stats_command, ["--help"])
    >>> result.exit_code, "--where" in result.output
    (0, True)
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from rlarrow.cli.commands import friendly_errors

__all__: list[str] = []


def _weights(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, float] | None:
    out: dict[str, float] = {}
    for value in values:
        run, sep, weight = value.rpartition("=")
        try:
            number = float(weight)
        except ValueError:
            number = None
        if not sep or not run or number is None:
            raise click.BadParameter(f"{value!r}: give RUN_ID=WEIGHT, e.g. 20260101T000000-ab12cd=0.7",
                                     ctx, param)
        out[run] = number
    return out or None


@click.command("stats")
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--where", help="A SQL filter over the episodes table: only the episodes it keeps "
                              "(e.g. \"metadata->>'split' = 'train'\", \"return > 100\").")
@click.option("--run", "runs", multiple=True, metavar="RUN_ID", help="Only this run (repeatable).")
@click.option("--weight", "weights", multiple=True, metavar="RUN_ID=W", callback=_weights,
              help="A mixture: each run's statistics weighted as if sampled with probability W "
                   "(repeatable; weights are normalised).")
@click.option("--column", "columns", multiple=True, metavar="NAME",
              help="Only this column (observation, action, reward, discount, observation.KEY; LeRobot's "
                   "timestamp, frame_index, episode_index, index, task_index; repeatable).")
@click.option("--no-quantiles", is_flag=True, help="Moments, min and max only (no q01..q99): faster.")
@click.option("--version", "version", type=click.IntRange(min=0), metavar="N",
              help="The store as it was at version N (`rlarrow history STORE`).")
@click.option("--layout", type=click.IntRange(min=1), metavar="N",
              help="Only steps layout N, for stores whose runs' observations differ in shape "
                   "(`rlarrow info STORE` lists the layouts).")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write LeRobot's stats.json to this file (default: print it).")
@friendly_errors
def stats_command(store: str, where: str | None, runs: tuple[str, ...], weights: dict[str, float] | None,
                  columns: tuple[str, ...], no_quantiles: bool, version: int | None, layout: int | None,
                  output: str | None) -> None:
    """Normalisation statistics of STORE's steps, as LeRobot's stats.json holds them.

    Per element (mean, std, min, max, q01..q99) merged from the statistics stored with every
    commit, for the episodes selected; steps written without them (older stores, Ray-staged
    files) are read once from the data. Camera frames (uint8 H x W x C observations) per
    channel in [0, 1], shape (C, 1, 1), from the frames LeRobot samples of each episode;
    a LeRobot import's columns under LeRobot's feature names. With them, for every run,
    LeRobot's timestamp, frame_index, episode_index, index and task_index of the frames
    `rlarrow export --format lerobot` would write of the selection: the stats.json it writes.
    """
    from rlarrow.io.lerobot import FRAME_KEYS
    from rlarrow.query.dataset_stats import lerobot_stats_json, stats, write_stats_json

    start = time.perf_counter()
    selection: dict[str, Any] = dict(where=where, runs=list(runs) or None, weights=weights,
                                     columns=list(columns) or None, quantiles=not no_quantiles,
                                     version=version, layout=layout)
    data = [c for c in columns if c not in FRAME_KEYS]
    result = stats(store, **{**selection, "columns": data or None}) if data or not columns else {}
    if not result and (data or not columns):
        raise click.ClickException("no steps in the selection: nothing to compute statistics of")
    shown = lerobot_stats_json(store, **selection)
    took = time.perf_counter() - start
    if not shown:
        raise click.ClickException(f"the selected steps hold no values of {sorted(result) or list(columns)} "
                                   "(all null, or no step with an action): nothing to write")
    if not no_quantiles:
        without = sorted(name for name in result if result[name].count and not result[name].has_quantiles
                         and name in shown)
        if without:
            click.echo(f"note: no quantiles (q01..q99) for {without}: their statistics were stored without "
                       "sketches (store.step_stats = 'moments', or datasketches missing when written: "
                       "pip install 'rlarrow[stats]')", err=True)
    if output:
        path = write_stats_json(shown, output)
        rows = max(int(s["count"][0]) for s in shown.values())
        click.echo(f"wrote {path}: {len(shown)} column(s), up to {rows} values each, in {took:.3f} s")
    else:
        json.dump(shown, sys.stdout, indent=2)
        click.echo()

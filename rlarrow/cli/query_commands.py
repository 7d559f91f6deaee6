"""``rlarrow sql`` and ``rlarrow plot``: a store read with SQL, and its learning curves drawn.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Registered on the ``rlarrow`` group in :mod:`rlarrow.cli` (this module uses
:mod:`rlarrow.cli.commands`' error handling, so commands.py cannot import it).

Examples (from a shell)::

    rlarrow sql runs.rlarrow "select run_id, count(*) from steps group by run_id"
    rlarrow plot runs.rlarrow --tag reward/mean -o curves.png
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import click

from rlarrow.cli.commands import StoreLocation, cli_spelling, friendly_errors
from rlarrow.core.errors import RLArrowWarning

__all__: list[str] = []


def _layouts(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, int] | None:
    """``--layout N`` (steps layout N) or ``--layout TABLE=N``, repeatable, as ``connect``'s ``layout``."""
    out: dict[str, int] = {}
    for value in values:
        table, eq, number = value.rpartition("=")
        if not eq:
            table = "steps"
        if table not in ("steps", "memory") or not number.isdigit() or int(number) < 1:
            raise click.BadParameter(f"{value!r}: give a steps layout's number (2) or TABLE=N (steps=2, "
                                     "memory=2); `rlarrow info STORE` lists the layouts", ctx, param)
        out[table] = int(number)
    return out or None


_LAYOUT_HELP = ("Read one layout of a table whose runs' tensors differ: N (steps layout N: steps, "
                "transitions, "
                "episode_returns) or TABLE=N (memory=2); repeatable. Without it the combined views widen a "
                "column whose types differ where exact, else leave it out (a note says which); "
                "`rlarrow info STORE` lists the layouts.")


@click.command("sql")
@click.argument("store", type=StoreLocation(exists=True, file_okay=False))
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True,
              help="table: a readable box (csv with -o); csv, json (one object per line), parquet: "
                   "streamed to -o FILE or to stdout.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result to this file.")
@click.option("--max-rows", type=click.IntRange(min=0), default=40, show_default=True,
              help="Rows shown by --format table.")
@click.option("--tensor", "tensors", multiple=True, metavar="NAME=TABLE.COLUMN",
              help="csv/json: result column NAME holds the binary-layout tensor TABLE.COLUMN (for a renamed "
                   "column, e.g. obs=steps.observation); repeatable.")
@click.option("--version", "version", type=click.IntRange(min=0), metavar="N",
              help="Query the store as it was at version N (`rlarrow history STORE` lists them).")
@click.option("--layout", "layouts", multiple=True, metavar="N|TABLE=N", callback=_layouts, help=_LAYOUT_HELP)
@friendly_errors
def sql_command(store: str, query: str, fmt: str, output: str | None, max_rows: int,
                tensors: tuple[str, ...], version: int | None, layouts: dict[str, int] | None) -> None:
    """Run a SQL QUERY over STORE with DuckDB.

    Views: runs, episodes, steps, scalars, memory, transitions. Macros: episode_returns(gamma),
    discounted_return(rewards, gamma), success_rate(flag), smoothed(n), ema(weight),
    steps_to_threshold(tag, threshold[, direction := 'below']). See docs/format.md for the columns.

    Binary-layout tensors (convert's default) are BLOBs in steps and memory; the views
    steps_decoded, memory_decoded and transitions_decoded hold them decoded to arrays of their
    dtype and shape, exactly, and tensor_<dtype>_<shape>(blob) decodes one (`rlarrow info STORE`
    lists the tensor columns).

    A store whose runs' tensors differ (a PPO and a DQN run: float and integer actions) keeps
    each set in a layout of its own; each has its exact views (steps_2, transitions_2,
    memory_2, steps_2_decoded...), and steps, transitions and memory combine them: a column
    whose types differ is widened where every value fits exactly (int32 and int64 to int64,
    float32 and float64 to float64), else left out, and a note on stderr says which.
    --layout 2 (or steps=2, memory=2) makes a table's plain views read that layout alone.

    csv, json and parquet stream the result batch by batch, whatever its size. In csv and json,
    tensors are nested lists ([[1.0, 2.0], [3.0, 4.0]]) and dict observations JSON objects;
    floats read back exactly; NaN and infinities are NaN, Infinity, -Infinity (strings in json).

    \b
    Examples:
      rlarrow sql runs.rlarrow 'select run_id, avg("return") from episodes group by all'
      rlarrow sql runs.rlarrow "select * from transitions" -o transitions.parquet --format parquet
      rlarrow sql runs.rlarrow "select step, observation from steps limit 5" --format json
      rlarrow sql runs.rlarrow "select states[1] from memory_decoded limit 5"
      rlarrow sql runs.rlarrow "select * from steps_to_threshold('train/loss', 0.05, direction := 'below')"
      rlarrow sql runs.rlarrow "select count(*) from episodes" --version 12
      rlarrow sql runs.rlarrow "select * from episode_returns(0.99)" --layout steps=2
    """  # noqa: D301 (click keeps a paragraph after a backspace character, \b, as it is)
    import duckdb
    import pyarrow as pa

    from rlarrow.core.store import Store
    from rlarrow.query import output as _export
    from rlarrow.query.connection import export_relation, readonly_store, tables_read
    from rlarrow.query.duckdb_errors import locate_remote
    from rlarrow.query.views import connect_checked

    if not query.strip():
        raise click.UsageError("QUERY is empty: give a SQL query, e.g. 'select * from episodes limit 5'")
    given: dict[str, str] = {}
    for item in tensors:
        name, eq, column = item.partition("=")
        if not eq or not name or "." not in column:
            raise click.UsageError(f"--tensor {item!r}: write NAME=TABLE.COLUMN, e.g. obs=steps.observation")
        given[name] = column
    if fmt == "table" and output is not None:
        fmt = "csv"
    binary_out: Any = None
    if fmt != "table" and output is None:
        binary_out = getattr(sys.stdout, "buffer", None)
        if binary_out is None:
            raise click.UsageError("stdout takes no bytes here; give -o FILE")
        if fmt == "parquet" and binary_out.isatty():
            raise click.UsageError("--format parquet writes binary: give -o FILE, or pipe stdout to a file")
    st = readonly_store(store, version)
    try:
        hints = _export.resolve_tensor_types(st, given)
    except ValueError as exc:
        raise click.UsageError(cli_spelling(str(exc))) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RLArrowWarning)
        # (the files of the tables the query reads are checked whole first: Store.verify)
        con = connect_checked(st, ema_window=None, database=":memory:", version=None, layout=layouts,
                              warn=True, verify=tables_read(query))
    for w in caught:
        if issubclass(w.category, RLArrowWarning):
            click.echo(f"note: {w.message}", err=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    try:
        try:
            rel = con.sql(query)
        except duckdb.Error as exc:
            if not isinstance(st, Store):  # a bucket's damaged file, named
                locate_remote(st, tables_read(query), exc)
            raise click.ClickException(
                f"{exc}\n(views: runs, episodes, steps, scalars, memory, sources, stats, videos, "
                "transitions, and steps_decoded, memory_decoded, transitions_decoded; a table of several "
                "layouts also steps_N, transitions_N, memory_N, and --layout picks one; `rlarrow info "
                "STORE` lists the columns)") from None
        if rel is None:
            click.echo("ok")
            return
        try:
            if fmt == "table":
                click.echo(_box(rel, max_rows))
                return
            rows = export_relation(st, rel, binary_out if output is None else output, fmt, hints=hints,
                                   overwrite=True)
        except (duckdb.Error, pa.ArrowException) as exc:
            if not isinstance(st, Store):  # (the rows are read as they are shown or written)
                locate_remote(st, tables_read(query), exc)
            if fmt == "table":
                raise
            raise click.ClickException(f"the query failed while its rows were written: {exc}") from None
    finally:
        con.close()
    if output is not None:
        click.echo(f"wrote {rows} rows to {output}", err=True)


@click.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--tag", "tags", multiple=True, help="A scalar tag to draw (repeat for more panels).")
@click.option("--run", "runs", multiple=True, metavar="RUN",
              help="Only this run, by id or name (repeat for more); default: all.")
@click.option("--group-by", metavar="name|source|KEY",
              help="Draw mean ± std per group of runs: by a runs column (name, source, ...) or a metadata "
                   "key (algo, params.lr); default: one across all runs.")
@click.option("--smooth", type=click.IntRange(min=0), default=0, show_default=True,
              help="Moving average over this many points (--episodes: 10 when not given).")
@click.option("--episodes", is_flag=True,
              help="Draw episode returns against env steps (curve and histogram) instead of tags.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The image to write (png, svg, pdf).")
@click.option("--layout", "layouts", multiple=True, metavar="N|TABLE=N", callback=_layouts,
              help="Only the runs whose steps are in steps layout N (or TABLE=N: memory=2), for a store "
                   "whose runs' tensors differ (PPO and DQN runs); `rlarrow info STORE` lists the layouts.")
@friendly_errors
def plot(store: str, tags: tuple[str, ...], runs: tuple[str, ...], group_by: str | None, smooth: int,
         episodes: bool, output: str, layouts: dict[str, int] | None) -> None:
    """Draw learning curves of STORE's scalars (--tag), or its episode returns (--episodes).

    A line per run and, with two runs or more, their mean ± std: one band per group with
    --group-by (runs of different algorithms apart), else one across all runs.

    \b
    Examples:
      rlarrow plot runs.rlarrow --tag train/loss --group-by algo --smooth 10 -o loss.png
      rlarrow plot runs.rlarrow --episodes --run ppo-seed1 --run ppo-seed2 -o returns.svg
    """  # noqa: D301 (click keeps a paragraph after a backspace character, \b, as it is)
    from rlarrow.query.plot import plot_episodes, plot_scalars

    if episodes == bool(tags):
        raise click.UsageError("give --tag TAG (one or more), or --episodes")
    if episodes:
        plot_episodes(store, runs=list(runs) or None, smooth=smooth or 10, group_by=group_by, output=output,
                      layout=layouts)
    else:
        plot_scalars(store, list(tags), runs=list(runs) or None, smooth=smooth, group_by=group_by,
                     output=output, layout=layouts)
    click.echo(f"wrote {output}")


def _box(rel: Any, max_rows: int) -> str:
    """DuckDB's own readable table, cut at ``max_rows`` rows."""
    total = rel.count("*").fetchall()[0][0] if max_rows else 0
    shown = rel.limit(max_rows) if max_rows and total > max_rows else rel
    text = str(shown)
    if max_rows and total > max_rows:
        text += f"({total} rows; {max_rows} shown: --max-rows N for more, or --format csv)\n"
    return text

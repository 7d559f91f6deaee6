"""The ``rlarrow`` command line.

Examples (from a shell)::

    rlarrow info runs.rlarrow            # tables, rows, runs, versions, size on disk
    rlarrow info runs.rlarrow --json     # the same as JSON
    rlarrow compact runs.rlarrow         # merge small files
    rlarrow repair runs.rlarrow          # name damaged files; --apply drops them
    rlarrow migrate runs.rlarrow         # upgrade a store written by an older rlarrow
    rlarrow convert runs/*/memories -o runs.rlarrow --num-envs 16   # skrl memory exports in
    rlarrow export runs.rlarrow -o legacy --format pt                # and back out
    rlarrow convert envlogger_dir minari_dataset -o runs.rlarrow     # episodes in
    rlarrow export runs.rlarrow -o logs --format envlogger --run-id RUN
    rlarrow --version
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from rlarrow._version import __version__
from rlarrow.cli import formats
from rlarrow.core.errors import RLArrowError, RLArrowWarning
from rlarrow.io import registry

if TYPE_CHECKING:
    from rlarrow.core.store import StoreReader

__all__ = ["cli", "cli_spelling", "compact", "convert", "delete", "export", "friendly_errors", "history",
           "info", "label", "main", "merge", "migrate", "plot", "push", "repair", "sql_command", "vacuum"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _human(n: float) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    for unit in units[:-1]:
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} {units[-1]}"


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    return bool(root is not None and root.params.get("debug")) or bool(os.environ.get("RLARROW_DEBUG"))


#: Python spellings in rlarrow's messages -> what a user of the command line types instead.
#: Python argument names whose option is spelled otherwise (the rest: ``max_rows`` -> ``--max-rows``).
_OPTIONS = {"run_id": "run", "runs": "run", "weights": "weight", "columns": "column"}

_CLI_SPELLINGS: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
    (r" ?\([a-z_]+=[^()]*? in Python\)", ""),  # "with --overwrite (overwrite=True in Python)"
    # "(overwrite=True; --overwrite in the CLI)"
    (r"\([a-z_]+=[^();]*; (--[a-z0-9-]+) in the CLI\)", r"(\1)"),
    (r"overwrite=True", "--overwrite"),
    (r"skip_corrupt=True \(rlarrow convert --skip-corrupt\)", "rlarrow convert --skip-corrupt"),
    (r"skip_corrupt=True", "rlarrow convert --skip-corrupt"),
    (r"\bagain=True\b", "--again"),
    (r"\brun_id names one run", "--run-id names one run"),
    (r"\bvideo='keep'", "--keep-video"),
    (r"\bimages='encoded'", "--keep-images-encoded"),
    (r"\bto='([a-z0-9_]+)'", r"--to \1"),
    (r"\ballow_hdf5_links=True\b", "--allow-hdf5-links"),
    (r"on_corrupt='skip'", "rlarrow convert --skip-corrupt"),
    (r"([Pp])ass num_envs=\.\.\.", r"\1ass --num-envs N"),
    (r"\bnum_envs=(\d+)", r"--num-envs \1"),
    (r"\bmemory_size=(\d+)", r"--memory-size \1"),
    (r"with dtype='float64'", "with --float64"),
    (r"pass run_id=\.\.\.|pass run_id= ", "pass --run-id RUN "),
    (r"create it with rlarrow\.Store\.create\((['\"])(.*?)\1\)",
     r"check the path, or create it by importing into it: rlarrow convert INPUTS -o \2"),
    (r"create one with rlarrow\.Store\.create\(path\)", "create one with: rlarrow convert INPUTS -o PATH"),
    (r"open it with rlarrow\.Store\.open\(path\) or pass exist_ok=True", "write into it (commands add to "
     "an existing store)"),
    (r"opened read-only \(readonly=True\)", "opened read-only"),
    (r"\(open it with readonly=True to read it\)", "(commands that only read it still work: info, sql, "
     "plot, export)"),
    (r"open it with readonly=True to read it", "commands that only read it still work (info, sql, plot, "
     "export)"),
    (r"tensor_types\['([^']*)'\] = '([^']*)'", r"--tensor \1=\2"),
    (r" or a pyarrow type such as rlarrow\.tensors\.tensor_type\(.*?layout='binary'\)", ""),
    (r"\(map names with names=\{role: name\}(, on the command line --names [^)]*)?\)",
     "(name the tensor of each role with --names ROLE=TENSOR,..., e.g. --names states=obs,actions=act)"),
    # an argument a message names, as the option that sets it
    (r"^(retain_hours|table|run_id|runs|spike_sigma|weights|columns|fps)(=|:)",
     lambda m: "--" + _OPTIONS.get(m.group(1), m.group(1).replace("_", "-")) + m.group(2)),
    (r"\(pass new_layout=True to add a layout of the table with these types\)",
     "(convert into another store, -o NEW_STORE; from Python, new_layout=True adds a layout with "
     "these types)"),
]


def cli_spelling(message: str) -> str:
    """``message`` with Python spellings (``overwrite=True``, ``Store.create(...)``) as CLI flags."""
    for pattern, replacement in _CLI_SPELLINGS:
        message = re.sub(pattern, replacement, message)
    return message


def friendly_errors(fn: _F) -> _F:
    """Turn every failure into a message and exit status 1, without a traceback (``--debug`` shows it).

    rlarrow's own errors say what is wrong and how to fix it. Anything else reaching here
    (the file system, pyarrow, DuckDB) is named with its type, so that a damaged input, a
    bad manifest, a read-only store or a full disk never ends in a traceback.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            _closed_pipe()
        except (RLArrowError, FileNotFoundError, FileExistsError) as exc:
            if _debug():
                raise
            raise click.ClickException(cli_spelling(str(exc))) from exc
        except OSError as exc:
            if _debug():
                raise
            raise click.ClickException(f"{exc.filename or ''}{': ' if exc.filename else ''}"
                                       f"{exc.strerror or exc} (the operation stopped; what was committed "
                                       "before is intact)") from exc
        except Exception as exc:
            if _debug():
                raise
            raise click.ClickException(
                f"unexpected {type(exc).__module__}.{type(exc).__name__}: {exc}\n(rerun with --debug for "
                "the traceback, and please report it: rlarrow should have said what went wrong)") from exc

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="rlarrow")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error (or set RLARROW_DEBUG=1).")
def cli(debug: bool) -> None:
    """rlarrow: RL runs as one queryable, streamable Arrow/Parquet dataset."""


@cli.command()
@click.argument("store", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--runs", "max_runs", type=click.IntRange(min=0), default=20, show_default=True,
              help="List at most this many runs (0: all).")
@friendly_errors
def info(store: str, as_json: bool, max_runs: int) -> None:
    """Show a store's tables, row counts, tensor columns, runs, schema versions and size on disk.

    Tensor columns show their dtype, shape and layout (binary: one blob per row, decoded in SQL
    by the *_decoded views; list: nested arrays). Each run shows its name, source, num_envs
    and its metadata, shortened to one line (--json gives it whole).
    """
    from rlarrow.core.store import Store

    st = Store.open(store, readonly=True)
    summary = st.info()
    videos = _video_fields(st) if summary.tables.get("videos") and summary.tables["videos"].rows else []
    if as_json:
        click.echo(json.dumps({**summary.to_dict(), "video_fields": videos}, indent=2))
        return
    click.echo(f"store    {summary.path}")
    click.echo(f"format   {summary.format_version} (written by {summary.writer}, "
               f"created {summary.created_at})")
    click.echo(f"on disk  {_human(summary.bytes_on_disk)}")
    click.echo(f"version  {summary.version} (`rlarrow history {store}` lists them)")
    if summary.retired_files:
        click.echo(f"replaced {summary.retired_files} files ({_human(summary.retired_bytes)}) kept for "
                   f"earlier versions: `rlarrow vacuum {store}` deletes them (a plain glob of a table "
                   "counts them until then)")
    click.echo("")
    click.echo(f"{'table':<10} {'rows':>12} {'files':>6} {'size':>10}  schema")
    for name, t in summary.tables.items():
        click.echo(f"{name:<10} {t.rows:>12,} {t.files:>6} {_human(t.bytes):>10}  v{t.schema_version}")
    tensor_lines = [f"  {name}.{column}: {_tensor_kind(what)}" for name, t in summary.tables.items()
                    for column, what in t.tensors.items()]
    if tensor_lines:
        click.echo("")
        click.echo("tensor columns")
        for line in tensor_lines:
            click.echo(line)
        if any(line.endswith(" binary") for line in tensor_lines):
            click.echo("  (binary: the rlarrow.tensor extension, a blob per row; SQL reads them as arrays "
                       "from the views steps_decoded, memory_decoded, transitions_decoded)")
    if videos:
        click.echo("")
        click.echo("video fields (the video layout: mp4 streams in `videos`, decoded by Reader, exports, "
                   "StreamingDataset and SQL's video_frame)")
        for v in videos:
            h, w, c = v["shape"]
            click.echo(f"  steps.{v['column']}: uint8 ({h}, {w}, {c}) {v['codec']}, {v['streams']:,} "
                       f"streams, {v['frames']:,} frames; SQL: tensor_uint8_{h}x{w}x{c}(video_frame("
                       f"run_id, episode_id, env_index, step, '{v['column']}'))")
    click.echo("")
    runs = summary.runs
    click.echo(f"runs ({len(runs)})")
    shown = runs if max_runs == 0 else runs[:max_runs]
    for r in shown:
        parts = [r["run_id"], f"{r['source']:<18}", str(r["created_at"])]
        if r.get("name"):
            parts.append(f"name={r['name']}")
        if r.get("num_envs") is not None:
            parts.append(f"num_envs={r['num_envs']}")
        if r.get("metadata") is not None:
            parts.append(_shorten_metadata(r["metadata"]))
        click.echo("  " + "  ".join(parts))
    if len(shown) < len(runs):
        click.echo(f"  ... {len(runs) - len(shown)} more (--runs 0 lists all)")
    if summary.problems:
        click.echo("")
        click.echo(f"damaged or missing files ({len(summary.problems)}): `rlarrow repair {store}` says "
                   "what dropping them costs")
        for p in summary.problems:
            click.echo(f"  {p.file}: {p.problem} ({p.rows:,} rows)")


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--apply", is_flag=True,
              help="Drop the damaged or missing files from the manifest (default: only say what would go).")
@friendly_errors
def repair(store: str, apply: bool) -> None:
    """Find a store's missing or damaged files and, with --apply, drop them so the rest reads again.

    A lost or damaged manifest is rebuilt first from each table's Delta log and Parquet
    files (or the error says exactly what cannot be). Every listed file is read whole.
    Dropped files leave the manifest; those still on disk move to STORE/_damaged/ (no table
    or engine reads them there). The report says how many rows each costs.
    """
    from pathlib import Path

    from rlarrow.core.errors import CorruptFileError
    from rlarrow.core.store import Store
    from rlarrow.core.store.repair import rebuild_manifest
    from rlarrow.core.store.segments import restore_lists

    # a lost or damaged manifest: rebuilt from the tables' Delta logs and Parquet files
    rebuilt = rebuild_manifest(Path(store), apply=apply)
    for line in rebuilt:
        click.echo(line)
    if rebuilt and not apply:
        click.echo("(dry run: --apply writes the manifest, then checks every file it lists)")
        return
    try:
        # without recovery: a damaged unlisted file would stop the open that is to repair it
        s = Store(store, readonly=not apply, _recover=False)
    except CorruptFileError as exc:
        if getattr(exc, "segment", None) is None:
            raise
        # a lost manifest segment: the tables' Delta logs list the same files
        lines = restore_lists(Path(store), apply=apply)
        if not lines:
            raise
        for line in lines:
            click.echo(line)
        if not apply:
            return
        s = Store(store, readonly=False, _recover=False)
    with s:
        report = s.repair(apply=apply)
    click.echo(str(report))


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--dry-run", is_flag=True, help="Only say what would be migrated.")
@friendly_errors
def migrate(store: str, dry_run: bool) -> None:
    """Upgrade a store written by an older rlarrow to the current format, in place."""
    from rlarrow.core.migrations import migrate as run_migrate

    for line in run_migrate(store, dry_run=dry_run, progress=True):
        click.echo(("would migrate " if dry_run and not line.startswith("nothing") else "") + line)


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--table", "tables", multiple=True, help="Only this table (repeatable).")
@friendly_errors
def compact(store: str, tables: tuple[str, ...]) -> None:
    """Merge a store's small Parquet files into larger ones."""
    from rlarrow.core.store import Store

    with Store.open(store) as s:
        changed = s.compact(list(tables) or None, progress=True)
    if not changed:
        click.echo("nothing to compact")
    for name, (before, after) in changed.items():
        click.echo(f"{name}: {before} -> {after} files")


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.argument("destination")
@click.option("--prune", is_flag=True,
              help="Afterwards delete the destination's data files the store no longer lists.")
@friendly_errors
def push(store: str, destination: str, prune: bool) -> None:
    """Copy a store to object storage or another directory (any pyarrow filesystem URI).

    Only files the destination lacks are copied; the manifest goes last, so readers of
    DESTINATION (s3://bucket/runs.rlarrow, gs://..., file:///...) never see half a push.
    """
    from rlarrow.core.remote import push as run_push

    copied = run_push(store, destination, prune=prune, progress=None)  # a bar only on a terminal
    click.echo(f"copied {len(copied)} file(s) to {destination}" if copied
               else f"{destination} is up to date; wrote its manifest")


def _tensor_kind(what: str) -> str:
    """How ``rlarrow info`` says a tensor column's kind; a bytes column is a blob a row (encoded images)."""
    if what.startswith(("binary ()", "large_binary ()")):
        return "bytes, one value a row (images kept encoded: rlarrow.io.rlds.decode_image decodes one)"
    return what


def _video_fields(st: StoreReader) -> list[dict[str, Any]]:
    """The store's video-layout fields: column, codec, frame shape, streams and frames."""
    table = st.read("videos", columns=["column", "codec", "height", "width", "channels", "steps"])
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in table.to_pylist():
        key = (r["column"], r["codec"], r["height"], r["width"], r["channels"])
        entry = found.setdefault(key, {"column": key[0], "codec": key[1], "shape": list(key[2:]),
                                       "streams": 0, "frames": 0})
        entry["streams"] += 1
        entry["frames"] += len(r["steps"])
    return list(found.values())


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the versions as JSON lines.")
@friendly_errors
def history(store: str, as_json: bool) -> None:
    """List STORE's versions: what each commit, compaction or edit made.

    Read any of them with `rlarrow sql STORE QUERY --version N`, `version=N` in Python, or
    with a Delta Lake engine: each table directory is a Delta table, whose own version is
    in the TABLES column (e.g. steps@4: `deltalake.DeltaTable("STORE/steps", version=4)`).
    """
    import datetime

    from rlarrow.core.store import Store

    st = Store.open(store, readonly=True)
    for item in st.history():
        if as_json:
            click.echo(json.dumps(item))
            continue
        when = datetime.datetime.fromtimestamp(item["timestamp"] / 1000, datetime.UTC) \
            if isinstance(item.get("timestamp"), int) else None
        tables = " ".join(f"{t}@{v}" for t, v in item["tables"].items())
        click.echo(f"{item['version']:>6}  {when:%Y-%m-%d %H:%M:%S}  {item['operation'] or '?':<9} {tables}"
                   if when else f"{item['version']:>6}  {item['operation'] or '?':<9} {tables}")
    if not as_json:
        click.echo(f"current version: {st.version}")


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--retain-hours", type=click.FloatRange(min=0), default=168, show_default=True,
              help="Keep files replaced more recently than this (earlier versions read them).")
@friendly_errors
def vacuum(store: str, retain_hours: float) -> None:
    """Delete the files compactions and edits replaced more than --retain-hours ago.

    Until then they stay, so that earlier versions stay readable (`--version`, Delta time
    travel); `--retain-hours 0` frees all of them, after which versions before the last
    compaction or edit can no longer be read.
    """
    from rlarrow.core.store import Store

    deleted = Store.open(store, readonly=False).vacuum(retain_hours=retain_hours)
    click.echo(f"deleted {len(deleted)} replaced file(s)")


def _episode_options(run: tuple[str, ...],
                     episode: tuple[int, ...]) -> tuple[list[str] | None, list[Any] | None]:
    """--run/--episode as delete()/label() take them: whole runs, or episodes of one run."""
    if episode:
        if len(run) != 1:
            raise click.UsageError("--episode needs exactly one --run (the run the episodes belong to)")
        return None, [(run[0], e) for e in episode]
    if not run:
        raise click.UsageError("say what: --run RUN (repeatable), with --episode N for episodes of it")
    return list(run), None


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--run", "run", multiple=True, help="A run to delete (repeatable).")
@click.option("--episode", "episode", multiple=True, type=int,
              help="Only this episode of the --run (repeatable).")
@friendly_errors
def delete(store: str, run: tuple[str, ...], episode: tuple[int, ...]) -> None:
    """Delete runs, or episodes of a run, from every table of STORE, in one commit.

    Readers see the store before or after, never between; the version before still reads
    the deleted rows (`rlarrow sql STORE QUERY --version N`) until `rlarrow vacuum`.

    \b
    Examples:
      rlarrow delete runs.rlarrow --run 20261123T101500-ab12
      rlarrow delete runs.rlarrow --run RUN --episode 3 --episode 17
    """  # noqa: D301
    from rlarrow.core.store import Store

    runs, episodes = _episode_options(run, episode)
    st = Store.open(store, readonly=False)
    if runs:  # as label: a run that is not there is an error that says which runs are
        unknown = [r for r in runs if not st.has_run(r)]
        known = st.read("runs", columns=["run_id"]).column("run_id").to_pylist() if unknown else []
        if unknown:
            shown = ", ".join(sorted(known)[:20]) + (" ..." if len(known) > 20 else "")
            raise click.ClickException(f"{store}: no run {', '.join(unknown)}; its runs: {shown or 'none'} "
                                       "(`rlarrow info STORE` lists them with their names)")
    counts = st.delete(runs=runs, episodes=episodes)
    if not counts:
        click.echo("nothing matched: the store is unchanged")
        return
    click.echo(", ".join(f"{t}: {n} rows" for t, n in counts.items()) + f" deleted (version {st.version})")


def _label_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a plain word: a string


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--run", "run", multiple=True, help="A run to label (repeatable).")
@click.option("--episode", "episode", multiple=True, type=int,
              help="Label this episode of the --run instead (repeatable).")
@click.option("--set", "pairs", multiple=True, metavar="KEY=VALUE", required=True,
              help="A metadata key and its value (JSON: true, 0.9, \"text\"; a plain word is text; "
                   "null removes the key); repeatable.")
@friendly_errors
def label(store: str, run: tuple[str, ...], episode: tuple[int, ...], pairs: tuple[str, ...]) -> None:
    """Set metadata keys of runs or episodes in STORE (success labels, splits), in one commit.

    Only the small runs/episodes files that hold them are rewritten; the steps are not.
    Query them with e.g. `metadata->>'$.split'`.

    \b
    Examples:
      rlarrow label runs.rlarrow --run RUN --episode 3 --set success=true
      rlarrow label runs.rlarrow --run RUN --set split=validation
    """  # noqa: D301
    from rlarrow.core.store import Store

    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key:
            raise click.UsageError(f"--set {pair!r}: write KEY=VALUE, e.g. --set split=validation")
        values[key] = _label_value(text)
    runs, episodes = _episode_options(run, episode)
    st = Store.open(store, readonly=False)
    counts = st.label(values, runs=runs, episodes=episodes)
    click.echo(", ".join(f"{t}: {n} rows" for t, n in counts.items()) + f" labelled (version {st.version})")


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.argument("others", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@friendly_errors
def merge(store: str, others: tuple[str, ...]) -> None:
    """Add every run of the OTHERS stores to STORE, each in one commit.

    Files are shared, not copied, where both stores are on one filesystem (hard links;
    files never change), and copied once otherwise.
    """
    from rlarrow.core.store import Store

    st = Store.open(store, readonly=False)
    for other in others:
        counts = st.merge(other)
        click.echo(f"{other}: " + (", ".join(f"{t}: {n} rows" for t, n in counts.items()) or "nothing")
                   + f" merged (version {st.version})")


def _convert_help() -> str:
    """``rlarrow convert --help``: the experiment layouts, then one entry per registered format."""
    lines = [
        "Import into STORE: experiment directories and the formats listed below.",
        "",
        "\b",
        "Each input becomes runs of the store:",
        "  runs/EXP        an experiment directory (skrl: event files, memories/, checkpoints/):",
        "                  ONE run named EXP holding its scalars, memory snapshots and",
        "                  (--episodes) episodes; checkpoints are not imported",
        "  runs/           every experiment below it, one run each",
    ]
    helps = (formats.convert_help(f) for f in registry.importers())
    for pattern, text in dict.fromkeys(h for h in helps if h is not None):
        first, *more = text.split("\n")
        if len(pattern) < 16:
            lines.append(f"  {pattern:<16}{first}")
        else:
            lines += [f"  {pattern}", f"  {'':<16}{first}"]
        lines += [f"  {'':<16}{line}" for line in more]
    lines += [
        "",
        "Every source is hashed first: one the store holds already is skipped, with a message",
        "naming its run (--again imports it again). One convert commits all or nothing: if",
        "anything fails, the store is left as it was.",
    ]
    return "\n".join(lines)


def _export_format_help() -> str:
    """``rlarrow export --format``'s help: what each registered exporter writes."""
    said = list(dict.fromkeys(formats.export_help(f) for f in registry.exporters()))
    return (", ".join(said[:-1]) + ", or " + said[-1] if len(said) > 1 else said[0]) + "."


@cli.command(help=_convert_help())
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", "store", required=True, type=click.Path(file_okay=False),
              help="The store to write into (created when missing).")
@click.option("--num-envs", type=click.IntRange(min=1),
              help="Environments of csv exports (csv files do not record it; 1 is assumed).")
@click.option("--memory-size", type=click.IntRange(min=1),
              help="Memory size of csv exports (default: the rows in the file per env).")
@click.option("--float64", "float64", is_flag=True, help="Read csv floats as float64 (default float32).")
@click.option("--run-id", help="File the snapshots under this run (new or existing).")
@click.option("--name", help="A name for the new run.")
@click.option("--layout", type=click.Choice(["binary", "list", "auto"]), default="binary",
              show_default=True,
              help="How a new memory table stores tensors: binary (fast, compact) or list (SQL reaches "
                   "elements).")
@click.option("--episodes", is_flag=True,
              help="Also unroll the snapshots into the episodes and steps tables (needs states, actions, "
                   "rewards, terminated tensors); one memory's consecutive exports unroll as one time "
                   "series. csv exports need --num-envs.")
@click.option("--skip-corrupt", is_flag=True,
              help="tfevents: skip records whose checksum fails (counted) instead of stopping; "
                   "envlogger: import the episodes that are whole and list the damaged ones skipped.")
@click.option("--names", "names_text", metavar="ROLE=TENSOR,...",
              help="With --episodes: which memory tensor plays which role, e.g. states=obs,actions=act "
                   "(roles: states, actions, rewards, next_states, terminated, truncated). skrl 1 names "
                   "(states, next_states) and skrl 2 names (observations, next_observations) are known.")
@click.option("--autoreset", type=click.Choice(["auto", "next-step", "same-step", "none"]), default="auto",
              show_default=True,
              help="With --episodes: how the vector env reset finished episodes (gymnasium 1.x make_vec: "
                   "next-step). auto: detected from the data where it shows.")
@click.option("--max-episode-steps", type=click.IntRange(min=1), metavar="N",
              help="With --episodes: the env's time limit, for memories without a truncated tensor (skrl's "
                   "DQN): episodes are cut after N steps as gymnasium's TimeLimit truncates them.")
@click.option("--again", is_flag=True,
              help="Import sources the store already holds (same content) once more, as new runs "
                   "(default: skip them, saying so).")
@click.option("--keep-images-encoded", is_flag=True,
              help="RLDS datasets: keep each image's PNG/JPEG bytes (a binary field, decoded on demand "
                   "with rlarrow.io.rlds.decode_image; exported back as they are) instead of uint8 pixels.")
@click.option("--keep-video", is_flag=True,
              help="LeRobot datasets: keep the cameras as video (the store's video layout: each episode's "
                   "segment copied, not decoded; readers decode frames on demand) instead of uint8 frames.")
@click.option("--allow-hdf5-links", is_flag=True,
              help="HDF5 files (D4RL, robomimic, Minari's HDF5 backend): follow external links and virtual "
                   "datasets whose files lie in the input's own directory (refused by default; never "
                   "outside it, whatever this flag).")
@click.option("--to", "to", type=click.Choice([f.name for f in registry.writers()]),
              help="Write the one INPUT dataset as this format at -o (a dataset, not a store), streamed "
                   "from reader to writer without a store.")
@click.option("--overwrite", is_flag=True, help="With --to: replace what the output holds.")
@friendly_errors
def convert(inputs: tuple[str, ...], store: str, num_envs: int | None, memory_size: int | None,
            float64: bool, run_id: str | None, name: str | None, layout: str, episodes: bool,
            skip_corrupt: bool, names_text: str | None, autoreset: str, max_episode_steps: int | None,
            again: bool,
            keep_images_encoded: bool, keep_video: bool, allow_hdf5_links: bool = False,
            to: str | None = None, overwrite: bool = False) -> None:
    """Import INPUTS into STORE (the help text is :func:`_convert_help`, made from the format registry)."""
    from rlarrow.io.importing import import_paths

    flags = {"num_envs": num_envs, "memory_size": memory_size, "float64": float64, "layout": layout,
             "episodes": episodes, "skip_corrupt": skip_corrupt, "autoreset": autoreset,
             "max_episode_steps": max_episode_steps, "keep_images_encoded": keep_images_encoded,
             "keep_video": keep_video, "allow_hdf5_links": allow_hdf5_links}
    if to is not None:
        _convert_to(inputs, to, store, overwrite=overwrite, options=formats.convert_options(flags))
        return

    names = None
    if names_text:
        names = {}
        for item in names_text.split(","):
            role, eq, tensor = item.strip().partition("=")
            if not eq or not role or not tensor:
                raise click.UsageError(f"--names {names_text!r}: write ROLE=TENSOR pairs separated by "
                                       "commas, e.g. states=observations,next_states=next_observations")
            names[role] = tensor
    try:
        report = import_paths(list(inputs), store, run_id=run_id, name=name, again=again,
                              options=formats.convert_options({**flags, "names": names}))
    except (Exception, KeyboardInterrupt):
        click.echo("convert: nothing was committed; the store is as it was before", err=True)
        raise
    click.echo(cli_spelling(str(report)))


def _convert_to(inputs: tuple[str, ...], to: str, output: str, *, overwrite: bool,
                options: dict[str, Any]) -> None:
    """``rlarrow convert INPUT --to FORMAT -o OUTPUT``: one dataset to another format, no store."""
    from rlarrow.io.transcode import convert_format

    if len(inputs) != 1:
        raise click.UsageError(f"--to {to} writes one dataset: give one INPUT, not {len(inputs)}")
    written = convert_format(inputs[0], to, output, overwrite=overwrite, options=options)
    click.echo(f"wrote {', '.join(str(p) for p in written)} as {to} from {inputs[0]}")


@cli.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", "directory", required=True, type=click.Path(),
              help="Directory to write into: memory exports go to DIR/memories/ (as skrl writes them), a "
                   "run's episodes are the dataset DIR (envlogger, minari, rlds, lerobot), event files go "
                   "to DIR/<run_id>/; robomimic: the .hdf5 file.")
@click.option("--format", "fmt", type=click.Choice([f.name for f in registry.exporters()]),
              default="pt", show_default=True, help=_export_format_help())
@click.option("--run-id", help="Memory formats: only this run's snapshots; episode formats: the run to "
                               "export (needed when the store holds several).")
@click.option("--overwrite", is_flag=True,
              help="Replace what the target holds (DIR/memories/, the dataset DIR, a run's event files, the "
                   ".hdf5 file); without it a target that holds anything is refused.")
@click.option("--data-format", type=click.Choice(["hdf5", "arrow", "parquet"]),
              help="minari: Minari's backend to write (default hdf5, Minari's own default).")
@click.option("--codebase", type=click.Choice(["v3.0", "v2.1"]),
              help="lerobot: the LeRobot codebase to write (default v3.0, lerobot 0.4 on; v2.1 for "
                   "lerobot 0.1 to 0.3).")
@click.option("--images", type=click.Choice(["auto", "video", "png"]),
              help="lerobot: camera frames as AV1 video (lossy, LeRobot's default) or PNG images "
                   "(lossless); auto keeps a LeRobot run's own choice, else video.")
@click.option("--fps", type=click.IntRange(min=1),
              help="lerobot: frames per second (default: the run's own for a LeRobot import, else 30).")
@click.option("--task", help="lerobot: the task of every episode of a run not imported from LeRobot "
                             "(default: the run's name).")
@friendly_errors
def export(store: str, directory: str, fmt: str, run_id: str | None, overwrite: bool,
           data_format: str | None, codebase: str | None, images: str | None, fps: int | None,
           task: str | None) -> None:
    """Write STORE back out: memory snapshots, a run's episodes, or scalars as event files.

    Memory snapshots go as skrl exports (pt, npz, csv, parquet), a run's episodes as an
    envlogger directory, a Minari dataset, an RLDS (TFDS) directory, a LeRobot dataset or a
    robomimic .hdf5 file, the scalars as TensorBoard event files (DIR/<run_id>/).
    """
    target = registry.get(fmt)
    assert target.export is not None  # (the --format choices are the exporters)
    options: dict[str, Any] = {}
    if data_format is not None:
        if "--data-format" not in formats.export_flags(target):
            raise click.UsageError(f"--data-format applies to --format minari, not {fmt}")
        options["data_format"] = data_format
    for flag, key, value in (("--codebase", "codebase", codebase), ("--images", "images", images),
                             ("--fps", "fps", fps), ("--task", "task", task)):
        if value is not None:
            if flag not in formats.export_flags(target):
                raise click.UsageError(f"{flag} applies to --format lerobot, not {fmt}")
            options[key] = value
    export_fn: Any = target.export  # (an exporter's own options beyond the protocol's)
    paths = export_fn(store, directory, run_id=run_id, overwrite=overwrite, **options)
    if not paths:
        click.echo(formats.export_empty(target))
        return
    for p in paths:
        click.echo(f"wrote {p}")
    click.echo(f"wrote {len(paths)} file(s) to {directory}")


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


@cli.command("sql")
@click.argument("store", type=click.Path(exists=True, file_okay=False))
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

    from rlarrow.query import output as _export
    from rlarrow.query.connection import export_relation, readonly_store, tables_read
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
            raise click.ClickException(
                f"{exc}\n(views: runs, episodes, steps, scalars, memory, sources, stats, videos, "
                "transitions, and steps_decoded, memory_decoded, transitions_decoded; a table of several "
                "layouts also steps_N, transitions_N, memory_N, and --layout picks one; `rlarrow info "
                "STORE` lists the columns)") from None
        if rel is None:
            click.echo("ok")
            return
        if fmt == "table":
            click.echo(_box(rel, max_rows))
            return
        try:
            rows = export_relation(st, rel, binary_out if output is None else output, fmt, hints=hints,
                                   overwrite=True)
        except (duckdb.Error, pa.ArrowException) as exc:
            raise click.ClickException(f"the query failed while its rows were written: {exc}") from None
    finally:
        con.close()
    if output is not None:
        click.echo(f"wrote {rows} rows to {output}", err=True)


@cli.command()
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


def _shorten_metadata(value: Any, width: int = 72) -> str:
    """Run metadata on one line: ``key=value`` pairs, long values and the whole line cut with ``...``."""

    def compact(item: Any) -> str:
        if isinstance(item, dict):
            return "{" + ",".join(f"{k}:{compact(v)}" for k, v in item.items()) + "}"
        if isinstance(item, list):
            return "[" + ",".join(compact(v) for v in item) + "]"
        if isinstance(item, float):
            return f"{item:.6g}"  # a float32 stored as its float64 value reads 0.0003, not 0.000300000014
        return json.dumps(item, ensure_ascii=False)

    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            text = compact(item)
            items.append(f"{key}={text if len(text) <= 24 else text[:21] + '...'}")
        line = " ".join(items)
    else:
        line = "metadata=" + compact(value)
    return line if len(line) <= width else line[:width - 3] + "..."


def _box(rel: Any, max_rows: int) -> str:
    """DuckDB's own readable table, cut at ``max_rows`` rows."""
    total = rel.count("*").fetchall()[0][0] if max_rows else 0
    shown = rel.limit(max_rows) if max_rows and total > max_rows else rel
    text = str(shown)
    if max_rows and total > max_rows:
        text += f"({total} rows; {max_rows} shown: --max-rows N for more, or --format csv)\n"
    return text


def _format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    line: str | None = None) -> str:
    """A warning as the command line shows it: ``warning: <message>``, no Python source line."""
    return f"warning: {message}\n"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``rlarrow`` command.

    A closed pipe (``rlarrow sql ... | head -1``) ends it quietly with status 141, as ``cat``
    and ``git`` do; warnings show as ``warning: <message>``.
    """
    warnings.formatwarning = _format_warning
    try:
        cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="rlarrow")
    except BrokenPipeError:
        _closed_pipe()


def _closed_pipe() -> None:
    """The reader of stdout went away: exit 141 (SIGPIPE's status), quietly.

    No traceback, and no second error when Python flushes stdout at exit.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(141)

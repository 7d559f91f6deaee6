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
from rlarrow.core.errors import RLArrowError

if TYPE_CHECKING:
    from rlarrow.core.store import StoreReader

__all__ = ["cli", "main"]

#: commands of other modules (registered on :func:`cli` in :mod:`rlarrow.cli`), still importable from here
_ELSEWHERE = {"convert": "rlarrow.cli.transfer_commands", "export": "rlarrow.cli.transfer_commands",
              "sql_command": "rlarrow.cli.query_commands", "plot": "rlarrow.cli.query_commands"}

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
    (r"\bautoreset='([a-z]+)'(?=: choose one of)", r"--autoreset \1"),
    (r"pass autoreset='next-step', 'same-step' or 'none'", "pass --autoreset next-step, same-step or none"),
    (r"\bnum_envs=N\b", "--num-envs N"),
    (r"\bmax_episode_steps=N\b", "--max-episode-steps N"),
    (r"\(run_id=\.\.\.\)", "(--run-id RUN)"),
    (r"export with images='png'", "export with --images png"),
    (r"; import_paths takes ", "; rlarrow convert takes "),
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


class StoreLocation(click.Path):
    """A store's directory (it must exist), or the URI of one on object storage, taken as it is."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from rlarrow.core.arguments import uri_scheme

        if isinstance(value, str) and uri_scheme(value) is not None:
            return value  # (s3://bucket/runs.rlarrow: read with the standard AWS variables)
        return super().convert(value, param, ctx)


@cli.command()
@click.argument("store", type=StoreLocation(file_okay=False))
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
    from rlarrow.core.remote import open_reader
    from rlarrow.core.store import Store

    st = open_reader(store)  # (a URI: the store pushed there, read through its manifest)
    summary = st.info()
    videos = _video_fields(st) if summary.tables.get("videos") and summary.tables["videos"].rows else []
    if as_json:
        click.echo(json.dumps({**summary.to_dict(), "video_fields": videos}, indent=2))
        return
    click.echo(f"store    {summary.path}")
    click.echo(f"format   {summary.format_version} (written by {summary.writer}, "
               f"created {summary.created_at})")
    click.echo(f"on disk  {_human(summary.bytes_on_disk)}" if isinstance(st, Store) else
               f"files    {_human(summary.bytes_on_disk)} listed (on object storage: not checked)")
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


def _format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    line: str | None = None) -> str:
    """A warning as the command line shows it: ``warning: <message>`` (in flags), no source line."""
    return f"warning: {cli_spelling(str(message))}\n"


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


def __getattr__(name: str) -> Any:
    """``rlarrow.cli.commands.convert`` (and export, sql_command, plot): the command, from its module."""
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

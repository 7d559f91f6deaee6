"""``rlarrow convert`` and ``rlarrow export``: data into a store, back out, or to another format.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Registered on the ``rlarrow`` group in :mod:`rlarrow.cli` (this module uses
:mod:`rlarrow.cli.commands`' error handling, so commands.py cannot import it). What the
command line says about each format, and the options it builds for each, is
:mod:`rlarrow.cli.formats`.

Examples (from a shell)::

    rlarrow convert runs/*/memories -o runs.rlarrow --num-envs 16   # skrl memory exports in
    rlarrow export runs.rlarrow -o legacy --format pt                # and back out
    rlarrow convert lerobot_dataset --to rlds -o rlds_dataset        # a format to another, no store
"""

from __future__ import annotations

from typing import Any

import click

from rlarrow.cli import formats
from rlarrow.cli.commands import cli_spelling, friendly_errors
from rlarrow.io import registry

__all__: list[str] = []


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
        "",
        "\b",
        "With --to FORMAT, the one INPUT is written as FORMAT at -o (no store); each writer",
        "takes its own flags:",
    ]
    for fmt in registry.writers():
        lines.append(f"  --to {fmt.name:<11}{' '.join(formats.write_flags(fmt)) or '(none)'}")
    return "\n".join(lines)


def _export_format_help() -> str:
    """``rlarrow export --format``'s help: what each registered exporter writes."""
    said = list(dict.fromkeys(formats.export_help(f) for f in registry.exporters()))
    return (", ".join(said[:-1]) + ", or " + said[-1] if len(said) > 1 else said[0]) + "."


def _writer_flags(command: Any) -> Any:
    """The flags of the writers' own options that ``rlarrow export`` and ``rlarrow convert --to`` share."""
    for option in reversed((
        click.option("--data-format", type=click.Choice(["hdf5", "arrow", "parquet"]),
                     help="minari: Minari's backend to write (default hdf5, Minari's own default)."),
        click.option("--codebase", type=click.Choice(["v3.0", "v2.1"]),
                     help="lerobot: the LeRobot codebase to write (default v3.0, lerobot 0.4 on; v2.1 for "
                          "lerobot 0.1 to 0.3)."),
        click.option("--images", type=click.Choice(["auto", "video", "png"]),
                     help="lerobot: camera frames as AV1 video (lossy, LeRobot's default) or PNG images "
                          "(lossless); auto keeps a LeRobot run's own choice, else video."),
        click.option("--fps", type=click.IntRange(min=1),
                     help="lerobot: frames per second (default: the run's own for a LeRobot import, "
                          "else 30)."),
        click.option("--task", help="lerobot: the task of every episode of a run not imported from LeRobot "
                                    "(default: the run's name)."),
    )):
        command = option(command)
    return command


@click.command(help=_convert_help())
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
@_writer_flags
@click.option("--dataset-id", help="With --to minari: the dataset's id (default: the input's, else "
                                   "rlarrow/<name>-v0).")
@click.option("--episodes-per-shard", type=click.IntRange(min=1), metavar="N",
              help="With --to rlds: episodes a TFRecord shard holds at most (default 1000).")
@friendly_errors
def convert(inputs: tuple[str, ...], store: str, num_envs: int | None, memory_size: int | None,
            float64: bool, run_id: str | None, name: str | None, layout: str, episodes: bool,
            skip_corrupt: bool, names_text: str | None, autoreset: str, max_episode_steps: int | None,
            again: bool,
            keep_images_encoded: bool, keep_video: bool, allow_hdf5_links: bool = False,
            to: str | None = None, overwrite: bool = False, **writing: Any) -> None:
    """Import INPUTS into STORE (the help text is :func:`_convert_help`, made from the format registry).

    ``writing``: the flags of the ``--to`` writers' own options (:data:`rlarrow.cli.formats.WRITE_FLAGS`).
    """
    from rlarrow.io.importing import import_paths

    flags = {"num_envs": num_envs, "memory_size": memory_size, "float64": float64, "layout": layout,
             "episodes": episodes, "skip_corrupt": skip_corrupt, "autoreset": autoreset,
             "max_episode_steps": max_episode_steps, "keep_images_encoded": keep_images_encoded,
             "keep_video": keep_video, "allow_hdf5_links": allow_hdf5_links}
    given = [_flag(key) for key, value in writing.items() if value is not None]
    if to is not None:
        target = registry.get(to)
        for flag in given:
            if flag not in formats.write_flags(target):
                raise click.UsageError(f"{flag} applies to {_writers_of(flag)}, not --to {to}")
        _convert_to(inputs, to, store, overwrite=overwrite, options=formats.convert_options(flags),
                    writing=formats.write_options(target, writing))
        return
    if given:
        raise click.UsageError(f"{given[0]} applies to {_writers_of(given[0])} (a dataset written from the "
                               "INPUT, no store); an import into a store takes no writer options")

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


def _flag(key: str) -> str:
    """A parameter's flag: ``episodes_per_shard`` is ``--episodes-per-shard``."""
    return "--" + key.replace("_", "-")


def _writers_of(flag: str) -> str:
    """``--to lerobot``: the writers ``flag`` applies to."""
    return " and ".join(f"--to {f.name}" for f in registry.writers() if flag in formats.write_flags(f))


def _convert_to(inputs: tuple[str, ...], to: str, output: str, *, overwrite: bool,
                options: dict[str, Any], writing: Any = None) -> None:
    """``rlarrow convert INPUT --to FORMAT -o OUTPUT``: one dataset to another format, no store."""
    from rlarrow.io.transcode import convert_format

    if len(inputs) != 1:
        raise click.UsageError(f"--to {to} writes one dataset: give one INPUT, not {len(inputs)}")
    written = convert_format(inputs[0], to, output, overwrite=overwrite, options=options, writing=writing)
    click.echo(f"wrote {', '.join(str(p) for p in written)} as {to} from {inputs[0]}")


@click.command()
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
@_writer_flags
@friendly_errors
def export(store: str, directory: str, fmt: str, run_id: str | None, overwrite: bool,
           data_format: str | None, codebase: str | None, images: str | None, fps: int | None,
           task: str | None) -> None:
    """Write STORE back out: memory snapshots, a run's episodes, or scalars as event files.

    Memory snapshots go as skrl exports (pt, npz, csv, parquet), a run's episodes as an
    envlogger directory, a Minari dataset, an RLDS (TFDS) directory, a LeRobot dataset or a
    robomimic .hdf5 file, the scalars as TensorBoard event files (DIR/<run_id>/).
    """
    from rlarrow.core.targets import refuse_object_storage

    refuse_object_storage(directory, f"a {fmt} export")  # (every format, before any is made)
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

"""What a fix leaves to its user: a :class:`~rlarrow.query.doctor.Hint` per kind of problem.

Internal: rlarrow's own modules import its names; none is user API (its ``__all__`` is empty).

Each hint says what the episodes (or findings) have, why no safe fix deals with it, and
what the user can do, with the ``rlarrow delete`` commands (and ``rlarrow label ... --set
suspect=true`` instead) that would: one per run, a few episodes each, a last ``...`` line
when there are more.

Example:
    >>> from rlarrow.query.doctor.findings import Finding, Report
    >>> found = Finding("gaps", "error", "steps", "r", 3, 5, "step 5 is missing")
    >>> counts = {"gaps": {"errors": 1, "warnings": 0, "listed": 1}}
    >>> print(hints(Report("s", [found], {}, counts), "s", [])[0])  # doctest: +NORMALIZE_WHITESPACE
    gaps: 1 episode with missing step numbers: not fixed automatically (the missing steps are not in
    the store); delete them, or mark them:
        rlarrow delete s --run r --episode 3
      or mark them instead (filter on metadata->>'$.suspect'):
        rlarrow label s --run r --episode 3 --set suspect=true
"""

from __future__ import annotations

from collections.abc import Sequence

from rlarrow.query.doctor.checks import CHECKS
from rlarrow.query.doctor.findings import Hint, Report, plural

__all__: list[str] = []

#: The references check's messages for rows ``--fix`` adds: the start of one, the end of the other.
NO_EPISODES_ROW = "no row in episodes for this episode"
NO_RUNS_ROW = "but no row in runs"
# delete/label commands shown per hint, and episodes per command
_COMMAND_LINES = 3
_EPISODES_PER_COMMAND = 10

# episode findings, per check: (what the episodes have, why not fixed, what the user can do)
_MARK = "delete them, or mark them"
_WHY = {
    "alignment": ("is_first / is_last / is_terminal flags that break RLDS alignment",
                  "which flag is wrong is a guess", "convert the source again, or " + _MARK),
    "duplicates": ("rows stored twice", "which copy to keep is a guess",
                   "delete them (every copy) and convert the source again, or mark them"),
    "gaps": ("missing step numbers", "the missing steps are not in the store", _MARK),
    "nonfinite": ("NaN or infinity", "replacing the values would invent data", _MARK),
    "frozen": ("one observation repeated", "a stuck sensor or a paused env is yours to judge", _MARK),
    "spikes": ("action spikes", "an outlier may be real", _MARK),
    "short_episodes": ("fewer steps than min_length", "they are recorded data", _MARK),
}
_DISAGREE = ("an episodes row that disagrees with their steps (num_steps or env_index)",
             "rewriting a recorded episodes row is not safe: the steps may be what is wrong, see duplicates "
             "and gaps", "delete them and convert them again, or mark them")
_NO_STEPS = ("an episodes row but no steps", "deleting the row loses what it records",
             "if the steps are gone for good, delete them")
_AMBIGUOUS = ("steps but no episodes row, and env_index differs between their steps",
              "an added row's env_index would be a guess", "delete them, or convert them again")
# findings no command deals with: what to do instead
_TEXT = {
    "memory": "replay-memory snapshots whose rows disagree with their buffer state: not fixed (the pointers "
              "are the source's); convert the memory export again, or leave these snapshots out",
    "monotonic steps": "steps stored out of step order: not rewritten (readers that order by step are "
                       "unaffected)",
    "monotonic scalars": "scalar tags whose wall_time goes backwards (a resumed run logged steps again): not "
                         "fixed; filter on wall_time when reading them",
    "duplicates runs": "run ids with several runs rows: not fixed (which row to keep is a guess)",
    "duplicates memory": "memory snapshots with a (memory_index, env_index) pair twice: not fixed (which row "
                         "to keep is a guess); convert the memory export again",
    "duplicates scalars": "scalar points logged twice: not fixed (harmless to plots; filter them when "
                          "reading)",
    "references runs": "run ids with no runs row (written after the fix?): run rlarrow check --fix again",
}


def hints(report: Report, name: str, left: Sequence[tuple[str, int, int, int]]) -> list[Hint]:
    """What remains in ``report`` (and the episodes the fix left), as hints with commands."""
    episodes: dict[tuple[str, tuple[str, str, str]], list[tuple[str, int]]] = {}
    texts: dict[str, int] = {}
    for f in report.findings:
        if f.check == "references":
            if f.message.endswith(NO_RUNS_ROW):
                texts["references runs"] = texts.get("references runs", 0) + 1
                continue
            if f.message.startswith(NO_EPISODES_ROW):
                continue  # the fix's own list (left) says why
            why = _NO_STEPS if f.message.startswith("no steps") else _DISAGREE
        elif f.episode_id is not None and f.check in _WHY and f.table in ("steps", "episodes"):
            why = _WHY[f.check]
        else:
            key = f"{f.check} {f.table}" if f"{f.check} {f.table}" in _TEXT else f.check
            texts[key] = texts.get(key, 0) + 1
            continue
        if f.run_id is not None and f.episode_id is not None:
            episodes.setdefault((f.check, why), []).append((f.run_id, f.episode_id))
    for run_id, episode_id, _, _ in left:
        episodes.setdefault(("references", _AMBIGUOUS), []).append((run_id, episode_id))
    found = []
    for (check, why), keys in episodes.items():
        unique = sorted(set(keys))
        label = why not in (_NO_STEPS, _AMBIGUOUS)  # label rewrites episodes rows: these have none to mark
        delete, marks = _commands(name, unique, label)
        what, reason, advice = why
        counted = report.counts.get(check, {})
        unlisted = sum(int(counted.get(k, 0)) for k in ("errors", "warnings")) - int(counted.get("listed", 0))
        among = f" (among the listed findings: {unlisted} more not listed)" if unlisted > 0 else ""
        found.append(Hint(check, f"{plural(len(unique), 'episode')}{among} with {what}: not fixed "
                                 f"automatically ({reason}); {advice}:", delete, marks))
    for key, n in texts.items():
        check = key.partition(" ")[0]
        text = _TEXT.get(key, "not fixed automatically")
        found.append(Hint(check, f"{plural(n, 'finding')}: {text}"))
    order = {n: i for i, n in enumerate(CHECKS)}
    return sorted(found, key=lambda h: order.get(h.check, len(order)))


def _commands(name: str, episodes: Sequence[tuple[str, int]], label: bool) -> tuple[tuple[str, ...],
                                                                                     tuple[str, ...]]:
    """``rlarrow delete`` (and ``label``) commands for ``episodes``: one per run, a few lines, ``...``."""
    import shlex

    by_run: dict[str, list[int]] = {}
    for run_id, episode_id in episodes:
        by_run.setdefault(run_id, []).append(episode_id)
    chunks = [(run, ids[i:i + _EPISODES_PER_COMMAND]) for run, ids in by_run.items()
              for i in range(0, len(ids), _EPISODES_PER_COMMAND)]
    shown = chunks[:_COMMAND_LINES]
    more = len(episodes) - sum(len(ids) for _, ids in shown)
    more_runs = len({run for run, _ in chunks[_COMMAND_LINES:]})
    tail = [f"... ({plural(more, 'more episode')} in {plural(more_runs, 'run')})"] if more else []
    heads = [f"{shlex.quote(name)} --run {shlex.quote(run)} " + " ".join(f"--episode {e}" for e in ids)
             for run, ids in shown]
    delete = tuple([*(f"rlarrow delete {h}" for h in heads), *tail])
    marks = tuple([*(f"rlarrow label {h} --set suspect=true" for h in heads), *tail]) if label else ()
    return delete, marks

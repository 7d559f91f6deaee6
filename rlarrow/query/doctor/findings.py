"""What the data doctor reports: findings of checks, and what a fix added or left.

Plain values, with their one-line text (what ``rlarrow check`` prints) and their JSON form
(``--json``): a :class:`Finding` per problem and the :class:`Report` of a
:func:`~rlarrow.query.doctor.check_store`; a :class:`Fixed` per row that
:func:`~rlarrow.query.doctor.fix_store` added, a :class:`Hint` per kind of problem it left, and
its :class:`FixReport`.

Example:
    >>> r = Report("s", [Finding("gaps", "error", "steps", "R", 0, 5, "step 5 is missing")], {},
    ...            {"gaps": {"errors": 1, "warnings": 0, "listed": 1, "seconds": 0.0}}, {})
    >>> r.summary()
    '1 error, 0 warnings in 1 check (gaps: 1 error)'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Finding", "FixReport", "Fixed", "Hint", "Report", "Severity"]

#: how bad a finding is: an ``error`` makes ``rlarrow check`` exit 1, a ``warning`` does not
Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem: which check found it, how bad, where, and what.

    ``episode_id`` and ``step`` are None where the problem is not one step's (a run, a
    memory snapshot, a scalar tag: the message names the snapshot or tag). For ``scalars``
    findings, ``step`` is the logged global step.

    Example:
        >>> print(Finding("alignment", "error", "steps", "R", 3, 17, "is_first set after the first step"))
        steps run=R episode=3 step=17: is_first set after the first step
    """

    check: str
    severity: Severity
    table: str
    run_id: str | None
    episode_id: int | None
    step: int | None
    message: str

    def __str__(self) -> str:
        where = [self.table]
        if self.run_id is not None:
            where.append(f"run={self.run_id}")
        if self.episode_id is not None:
            where.append(f"episode={self.episode_id}")
        if self.step is not None:
            where.append(f"step={self.step}")
        return f"{' '.join(where)}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready values.

        Example:
            >>> Finding("gaps", "error", "steps", "R", 0, 5, "step 5 is missing").to_dict()["step"]
            5
        """
        return {"check": self.check, "severity": self.severity, "table": self.table, "run_id": self.run_id,
                "episode_id": self.episode_id, "step": self.step, "message": self.message}


@dataclass
class Report:
    """What :func:`check_store` found.

    Attributes:
        store: the store's path.
        findings: the findings kept (each check's first ``max_findings``), check by check.
        skipped: checks that did not apply, with the reason (``{"memory": "no rows in memory"}``).
        counts: per check run, ``{"errors": n, "warnings": n, "listed": n, "seconds": s}``:
            every finding counted, ``listed`` of them kept in ``findings``.
        parameters: the thresholds and checks asked for.

    Example:
        >>> r = Report("s", [Finding("gaps", "error", "steps", "R", 0, 5, "step 5 is missing")], {},
        ...            {"gaps": {"errors": 1, "warnings": 0, "listed": 1, "seconds": 0.0}}, {})
        >>> r.ok, r.errors, r.warnings
        (False, 1, 0)
        >>> print(r)
        steps run=R episode=0 step=5: step 5 is missing
        1 error, 0 warnings in 1 check (gaps: 1 error)
    """

    store: str
    findings: list[Finding]
    skipped: dict[str, str]
    counts: dict[str, dict[str, Any]]
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        """Errors found, listed or not."""
        return sum(int(c["errors"]) for c in self.counts.values())

    @property
    def warnings(self) -> int:
        """Warnings found, listed or not."""
        return sum(int(c["warnings"]) for c in self.counts.values())

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return self.errors == 0

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values: store, ok, counts per check, parameters, findings.

        Example:
            >>> sorted(Report("s", [], {"memory": "no rows in memory"}, {}, {}).to_dict())
            ['checks', 'errors', 'findings', 'ok', 'parameters', 'skipped', 'store', 'warnings']
        """
        return {"store": self.store, "ok": self.ok, "errors": self.errors, "warnings": self.warnings,
                "parameters": dict(self.parameters), "checks": {k: dict(v) for k, v in self.counts.items()},
                "skipped": dict(self.skipped), "findings": [f.to_dict() for f in self.findings]}

    def summary(self) -> str:
        """The summary line: errors and warnings per check, what was not listed, what was skipped.

        Example:
            >>> Report("s", [], {"memory": "no rows in memory"}, {}, {}).summary()
            'no problems found in 0 checks; skipped: memory (no rows in memory)'
        """
        parts = []
        unlisted = 0
        for name, c in self.counts.items():
            found = int(c["errors"]) + int(c["warnings"])
            unlisted += found - int(c["listed"])
            if found:
                kinds = [plural(int(c[k]), k[:-1]) for k in ("errors", "warnings") if c[k]]
                parts.append(f"{name}: {', '.join(kinds)}")
        checks = plural(len(self.counts), "check")
        text = (f"{plural(self.errors, 'error')}, {plural(self.warnings, 'warning')} in {checks} "
                f"({'; '.join(parts)})" if parts else f"no problems found in {checks}")
        if unlisted:
            text += f"; {unlisted} more not listed (max_findings={self.parameters.get('max_findings')})"
        if self.skipped:
            text += "; skipped: " + ", ".join(f"{k} ({v})" for k, v in self.skipped.items())
        return text

    def __str__(self) -> str:
        return "\n".join([*(str(f) for f in self.findings), self.summary()])


def plural(n: int, noun: str) -> str:
    """``1 error``, ``2 errors``: ``n`` and ``noun``, plural unless ``n`` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True)
class Fixed:
    """A row :func:`fix_store` added: its table, its key, what it says.

    ``values`` holds the row's derived columns (``num_steps``, ``return``, flags; ``return`` is
    None where it is not finite or the steps have no reward).

    Example:
        >>> print(Fixed("runs", "ghost", None, "added a runs row"))
        runs run=ghost: added a runs row
    """

    table: str
    run_id: str
    episode_id: int | None
    message: str
    values: dict[str, Any] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        where = [self.table, f"run={self.run_id}"]
        if self.episode_id is not None:
            where.append(f"episode={self.episode_id}")
        return f"{' '.join(where)}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready values.

        Example:
            >>> Fixed("runs", "ghost", None, "added a runs row").to_dict()["table"]
            'runs'
        """
        return {"table": self.table, "run_id": self.run_id, "episode_id": self.episode_id,
                "message": self.message, "values": dict(self.values)}


@dataclass(frozen=True)
class Hint:
    """What was not fixed automatically, why, and the commands that would deal with it.

    ``commands`` are ``rlarrow delete`` commands (one per run, a few episodes each; a last
    ``...`` line when there are more), ``label_commands`` the ``rlarrow label`` commands that
    mark the same episodes instead (``--set suspect=true``). Both are empty where no command
    helps (the hint's message says what to do).

    Example:
        >>> print(Hint("short_episodes", "1 episode(s) shorter than min_length", ("rlarrow delete S --run r "
        ...            "--episode 3",)))
        short_episodes: 1 episode(s) shorter than min_length
            rlarrow delete S --run r --episode 3
    """

    check: str
    message: str
    commands: tuple[str, ...] = ()
    label_commands: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"{self.check}: {self.message}", *(f"    {c}" for c in self.commands)]
        if self.label_commands:
            lines.append("  or mark them instead (filter on metadata->>'$.suspect'):")
            lines.extend(f"    {c}" for c in self.label_commands)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The hint as JSON-ready values.

        Example:
            >>> sorted(Hint("memory", "not fixed").to_dict())
            ['check', 'commands', 'label_commands', 'message']
        """
        return {"check": self.check, "message": self.message, "commands": list(self.commands),
                "label_commands": list(self.label_commands)}


@dataclass
class FixReport:
    """What :func:`fix_store` added, in one commit, and what is left for its user.

    Attributes:
        store: the store's path.
        fixed: the rows added (the first ``max_findings`` of the report's parameters; ``added``
            counts them all).
        added: rows added per table (``{}``: nothing to fix safely, the store is unchanged).
        hints: what remains that no safe fix deals with, with the commands that would.
        version_before, version_after: the store's version before and after (one more when
            rows were added: one commit).
        checked: the report the fixes were chosen from.
        remaining: the checks run again after the fix (``checked`` itself when nothing changed).

    Example:
        >>> r = FixReport("s", [], {}, [], 3, 3, Report("s", [], {}, {}, {}), Report("s", [], {}, {}, {}))
        >>> r.changed, r.summary()
        (False, 'nothing to fix safely: the store is unchanged (version 3)')
    """

    store: str
    fixed: list[Fixed]
    added: dict[str, int]
    hints: list[Hint]
    version_before: int
    version_after: int
    checked: Report
    remaining: Report

    @property
    def changed(self) -> bool:
        """Whether rows were added (a new store version)."""
        return self.version_after != self.version_before

    def summary(self) -> str:
        """What the fix did, in one line.

        Example:
            >>> FixReport("s", [], {"runs": 1, "episodes": 2}, [], 3, 4, Report("s", [], {}, {}, {}),
            ...           Report("s", [], {}, {}, {})).summary()
            'added 1 runs row and 2 episodes rows in one commit (version 3 -> 4)'
        """
        if not self.added:
            return f"nothing to fix safely: the store is unchanged (version {self.version_after})"
        rows = " and ".join(f"{n} {table} row{'' if n == 1 else 's'}" for table, n in self.added.items())
        return f"added {rows} in one commit (version {self.version_before} -> {self.version_after})"

    def to_dict(self) -> dict[str, Any]:
        """The fix as JSON-ready values: added, versions, fixed rows, hints.

        Example:
            >>> sorted(FixReport("s", [], {}, [], 3, 3, Report("s", [], {}, {}, {}),
            ...                  Report("s", [], {}, {}, {})).to_dict())
            ['added', 'fixed', 'hints', 'store', 'version_after', 'version_before']
        """
        return {"store": self.store, "added": dict(self.added), "version_before": self.version_before,
                "version_after": self.version_after, "fixed": [f.to_dict() for f in self.fixed],
                "hints": [h.to_dict() for h in self.hints]}

    def __str__(self) -> str:
        return "\n".join([*(f"fixed: {f}" for f in self.fixed), *(str(h) for h in self.hints),
                          self.summary()])

"""The ``rlarrow`` command line (:mod:`~rlarrow.cli.commands`) and the demo (:mod:`~rlarrow.cli.demo`).

The top layer: it may import every other layer; nothing imports it.
"""

from typing import Any

from rlarrow.cli.check import check as check_command
from rlarrow.cli.commands import cli, compact, info, main, migrate, push, repair
from rlarrow.cli.query_commands import plot, sql_command
from rlarrow.cli.stats_command import stats_command
from rlarrow.cli.transfer_commands import convert, export
from rlarrow.core import submodule

# (registered here: check.py, stats_command.py, transfer_commands.py and query_commands.py use
# commands.py's error handling, so commands.py cannot import them)
for _command in (check_command, stats_command, convert, export, sql_command, plot):
    cli.add_command(_command)

# the commands, as rlarrow.cli (one module before 0.2) had them: click's CliRunner drives `cli`
__all__ = ["cli", "compact", "convert", "export", "info", "main", "migrate", "plot", "push", "repair",
           "sql_command"]


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.cli.<module>
    return submodule(__name__, name)

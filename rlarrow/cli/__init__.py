"""The ``rlarrow`` command line (:mod:`~rlarrow.cli.commands`) and the demo (:mod:`~rlarrow.cli.demo`).

The top layer: it may import every other layer; nothing imports it.
"""

from typing import Any

from rlarrow.cli.check import check as check_command
from rlarrow.cli.commands import cli, main
from rlarrow.cli.commands import compact as compact
from rlarrow.cli.commands import info as info
from rlarrow.cli.commands import migrate as migrate
from rlarrow.cli.commands import push as push
from rlarrow.cli.commands import repair as repair
from rlarrow.cli.query_commands import plot as plot
from rlarrow.cli.query_commands import sql_command as sql_command
from rlarrow.cli.stats_command import stats_command
from rlarrow.cli.transfer_commands import convert as convert
from rlarrow.cli.transfer_commands import export as export
from rlarrow.core import submodule

# (registered here: check.py, stats_command.py, transfer_commands.py and query_commands.py use
# commands.py's error handling, so commands.py cannot import them)
for _command in (check_command, stats_command, convert, export, sql_command, plot):
    cli.add_command(_command)

# the user API is the `rlarrow` command (click's CliRunner drives `cli`); the commands still import
# from here by name, as rlarrow.cli (one module before 0.2) had them
__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:  # a submodule on first use: rlarrow.cli.<module>
    return submodule(__name__, name)

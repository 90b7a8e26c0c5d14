"""The `evalkit` command line: every command parses, calls the library once, prints.

One module per command; `_common` holds the error handling (an EvalkitError is one line
`error: ...` and the class's exit code), the console and the shared options. The exit codes are
evalkit.errors.EXIT_CODES, printed at the end of `evalkit --help` (and in docs/commands.md).
"""

from __future__ import annotations

import logging
import os
import sys

import click

# The command line owns the terminal: lm-eval's own progress bars (one per task build and per
# request batch, on stderr, not switchable per call) would drown evalkit's progress lines. tqdm
# reads TQDM_* when it is first imported, so this is set before anything imports it. A library
# user calling evalkit.run_matrix keeps their own tqdm settings.
os.environ.setdefault("TQDM_DISABLE", "1")

from evalkit import __version__
from evalkit.cli._common import EXIT_CODES_HELP, _Group
from evalkit.cli.bisect import bisect
from evalkit.cli.calibrate import calibrate
from evalkit.cli.cell import cell
from evalkit.cli.compare import compare
from evalkit.cli.detect import detect
from evalkit.cli.history import history
from evalkit.cli.matrix import matrix
from evalkit.cli.plan import plan
from evalkit.cli.prepare import prepare
from evalkit.cli.report import report
from evalkit.run.signals import ignore_stop_signals


@click.group(cls=_Group, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="evalkit")
def main() -> None:
    """evalkit: did this change break model accuracy in any serving configuration?

    It expands a config's axes (e.g. TP/DP x graph mode x fix on/off) into cells, starts the
    engine for each cell, scores GSM8K through lm-eval, runs a long-generation repeated-token
    detector, and tabulates accuracy, collapse rates and paired deltas with their significance.

    \b
    Example:
      evalkit matrix --model demo            # the whole pipeline on the simulated engine
      evalkit plan --model deepseek-v4       # the 12 ATOM command lines, nothing started
    """


main.add_command(matrix)
main.add_command(plan)
main.add_command(prepare)
main.add_command(cell)
main.add_command(detect)
main.add_command(report)
main.add_command(compare)
main.add_command(history)
main.add_command(calibrate)
main.add_command(bisect)


def run() -> None:
    """The `evalkit` program (`python -m evalkit.cli` too): `main`, and once the command is done
    (its output printed, its exit code decided) nothing more is handled:

    * no signal: a Ctrl-C or SIGTERM in the last milliseconds prints nothing after the report;
    * no interpreter teardown: the process exits as soon as its output and logs are flushed.
      Tearing down what lm-eval, datasets and scipy loaded took 4-7 s after the report on a
      loaded 2-core box, while a CI runner's timeout or a user waited for the process to end.
      Every file evalkit writes is closed, whole, before the command returns, and its engines
      are stopped; a cell's worker that an interrupt left behind ends with the process.

    Tests call `main` in-process and keep their own handlers and teardown. A crash (any other
    exception) goes the usual way: its traceback, then a normal exit.
    """
    try:
        main()
    except SystemExit as e:
        ignore_stop_signals()
        code = e.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)  # what Python does with a message as the exit status
            code = 1
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe (`| head`) or stream: nothing more can be said
                pass
        os._exit(code or 0)
    finally:
        ignore_stop_signals()

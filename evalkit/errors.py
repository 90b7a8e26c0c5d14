"""evalkit's exception tree and exit codes: the one place both are written down.

Expected failures are raised as one of these, so the CLI can print one clean line and exit with
the code of the class, and the cell lifecycle (run/cell.py) can turn an engine's failure into that cell's error instead
of a crash of the whole matrix. Low-level errors are re-raised as the most specific class `from`
the cause::

    EvalkitError                 expected; printed as one line, no traceback
    ├── ConfigError              bad input: config file, CLI arguments, run ids        exit 2
    ├── SourceError              an engine source {repo, ref} that cannot be checked out exit 2
    ├── LockHeld                 another run holds the device lock                      exit 4
    │   └── GpusBusy             other processes use the run's GPUs (before any cell)   exit 4
    ├── EngineError              one cell's engine did not serve (that cell's error)
    │   ├── EngineExited         the process ended before it was ready (exit code, log tail)
    │   │   └── PortInUse        ... because its port was taken (run/cell.py retries another)
    │   ├── StartupTimeout       not ready within the startup timeout
    │   ├── EngineFault          a fatal line in its log (e.g. "Memory access fault")
    │   ├── SetupFailed          its source tree's setup step (the build) failed         exit 3
    │   ├── LogAssertionFailed   its log breaks a config `log:` assertion (checked before the evals)
    │   ├── TreeNotProven        its package would import from outside the cell's source tree
    │   │                        (checked before the engine starts, which it then never does)
    │   └── GpuMemoryHeld        its GPUs' memory was not given back after it stopped
    ├── EvalError                an eval could not produce a score (that cell's error; exit 2
    │                            when raised before any cell, e.g. missing GSM8K data)
    └── StreamBroken             a stream closed before [DONE] (transient: generated again)

    BaseException
    └── Interrupted              SIGINT/SIGTERM: the run stops, finished cells are kept  exit 130

Every class carries a message that already names the file, field or cell it is about.

`evalkit bisect` raises the same classes for bad input (an unknown ref or good not an ancestor
of bad is a SourceError/ConfigError, exit 2) and the same Interrupted; its other outcomes are
results written to bisect.json, not errors, with the codes of BISECT_EXIT_CODES.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_THRESHOLD = 1
EXIT_BAD_INPUT = 2
EXIT_CELL_FAILED = 3
EXIT_LOCKED = 4
EXIT_INCONCLUSIVE = 5
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "all cells ran, no failing threshold broke",
    EXIT_THRESHOLD: "a failing threshold broke",
    EXIT_BAD_INPUT: "bad input (config, arguments, source ref); nothing started",
    EXIT_CELL_FAILED: "a cell failed to run (engine crash, timeout, eval error)",
    EXIT_LOCKED: "another run holds the device lock, or other processes use the GPUs (--wait-for-gpus)",
    EXIT_INCONCLUSIVE: "only with --strict: nothing broke, but something was not judged: a failing threshold's check "
                       "was INCONCLUSIVE (too few samples to tell), or no check judged a cell",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C / SIGTERM); finished cells kept",
}
"""The exit codes of `evalkit matrix` and `evalkit report` (the CLI's --help prints this table)."""

EXIT_ENDS_NOT_AS_CLAIMED = 1
"""bisect: the bad end is not bad against the good end (or an end did not run)."""
EXIT_ONLY_UNTESTABLE = 3
"""bisect: every commit left between the last good and the first bad one is untestable."""

BISECT_EXIT_CODES: dict[int, str] = {
    EXIT_OK: "the first bad commit was found",
    EXIT_ENDS_NOT_AS_CLAIMED: "the ends are not as claimed (the bad end is not bad vs the good end, or an end did not run)",
    EXIT_BAD_INPUT: "bad input (config, cell, unknown ref, good not an ancestor of bad); nothing started",
    EXIT_ONLY_UNTESTABLE: "only untestable commits left: the first bad commit is one of a reported range",
    EXIT_LOCKED: "another run holds the device lock",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C / SIGTERM); finished steps kept, --resume continues",
}
"""The exit codes of `evalkit bisect` (its --help prints this table)."""


class EvalkitError(Exception):
    """Base of every error evalkit expects and reports without a traceback."""

    cli_exit_code: int = EXIT_BAD_INPUT
    """What the CLI exits with when this error ends a command."""


class ConfigError(EvalkitError):
    """Bad input: nothing is started and nothing is overwritten when this is raised."""


class SourceError(EvalkitError):
    """An engine source tree (`{repo, ref}`) could not be resolved or checked out."""


class LockHeld(EvalkitError):
    """Another evalkit run holds the device lock."""

    cli_exit_code = EXIT_LOCKED


class GpusBusy(LockHeld):
    """Before the first cell, other processes hold memory on (or compute on) the run's GPUs: an
    engine started now would share a GPU by accident (evalkit/devices/busy.py)."""


class EngineError(EvalkitError):
    """An engine process failed to start, to become ready, or to keep serving."""

    def __init__(self, message: str, *, log_tail: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.exit_code = exit_code
        """The engine process's own exit code (None if it still ran); not evalkit's."""


class EngineExited(EngineError):
    """The engine process exited while evalkit was waiting for it or using it."""


class PortInUse(EngineExited):
    """The engine exited because its port was taken: the caller retries on another port."""


class StartupTimeout(EngineError):
    """The engine did not become ready within the configured startup timeout."""


class EngineFault(EngineError):
    """The engine log printed a line that the profile marks as fatal."""


class SetupFailed(EngineError):
    """A source tree's setup step failed: that cell's error (bisect: the commit is untestable);
    `evalkit prepare` exits 3 with it. `info` is what the cell records under `setup`."""

    cli_exit_code = EXIT_CELL_FAILED

    def __init__(self, message: str, *, info: dict[str, object], log_tail: str = "",
                 exit_code: int | None = None) -> None:
        super().__init__(message, log_tail=log_tail, exit_code=exit_code)
        self.info = info


class LogAssertionFailed(EngineError):
    """Once ready, the engine's log broke an assertion of the config (`log:`): the cell did not
    run what its axis values say, so its evals are not run."""


class TreeNotProven(EngineError):
    """The cell's interpreter would import the engine's package from outside the cell's source
    tree (engine/imports.py): the cell would run other code than its commit, so it does not start."""


class EvalError(EvalkitError):
    """An eval could not produce a trustworthy score for the cell."""

    log_tail: str = ""
    """The engine log's last lines, attached by run/cell.py when the engine is still alive."""


class CalibrationFailed(EvalkitError):
    """A repeat of `evalkit calibrate` did not run its cell: that cell's noise cannot be measured."""

    cli_exit_code = EXIT_CELL_FAILED


class StreamBroken(EvalkitError):
    """The server closed a stream before `[DONE]`: transient, the prompt is generated again."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: the run stops, finished cells are kept.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way (a cell's
    error handling, lm-eval's retries) mistakes a stop for a failure.
    """

    def __init__(self, message: str = "", signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = signum
        """The signal whose handler raised this (run/signals.py), which a finalizer that swallowed
        it is sent again; None for a stop passed on (a cancelled eval, a stopped step)."""


class GpuMemoryHeld(EngineError):
    """After a cell's engine stopped, its GPUs' used memory did not come back near the level seen
    before the cell within `timeouts.gpu_release`: the next cell would fail with out-of-memory and
    be blamed on its engine (evalkit/devices/release.py). The message names the holders."""


"""evalkit's exception tree.

Expected failures are raised as one of these, so the CLI can print one clean line and exit with
the documented code, and the runner can turn an engine's failure into that cell's error instead of
a crash of the whole matrix::

    EvalkitError
    ├── ConfigError            bad input: config file, CLI arguments, run ids (exit code 2)
    ├── SourceError            an engine source {repo, ref} that cannot be checked out (exit 2)
    ├── EngineError            one cell's engine did not serve
    │   ├── EngineExited       the process ended before it was ready (exit code, log tail)
    │   ├── StartupTimeout     not ready within the startup timeout
    │   └── EngineFault        a fatal line in its log (e.g. "Memory access fault")
    └── EvalError              an eval could not produce a score (HTTP failures, bad responses)

Every class carries a message that already names the file, field or cell it is about.
"""

from __future__ import annotations

# evalkit's exit codes (README, `evalkit --help`); here so the CLI can name them without
# importing the statistics stack.
EXIT_OK = 0
EXIT_THRESHOLD = 1
EXIT_BAD_INPUT = 2
EXIT_CELL_FAILED = 3
EXIT_LOCKED = 4
EXIT_INTERRUPTED = 130


class EvalkitError(Exception):
    """Base of every error evalkit expects and reports without a traceback."""


class ConfigError(EvalkitError):
    """Bad input: nothing is started and nothing is overwritten when this is raised."""


class SourceError(EvalkitError):
    """An engine source tree (`{repo, ref}`) could not be resolved or checked out."""


class EngineError(EvalkitError):
    """An engine process failed to start, to become ready, or to keep serving."""

    def __init__(self, message: str, *, log_tail: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.exit_code = exit_code


class EngineExited(EngineError):
    """The engine process exited while evalkit was waiting for it or using it."""


class StartupTimeout(EngineError):
    """The engine did not become ready within the configured startup timeout."""


class EngineFault(EngineError):
    """The engine log printed a line that the profile marks as fatal."""


class StreamBroken(EvalkitError):
    """The server closed a stream before `[DONE]`: transient, the prompt is generated again."""


class EvalError(EvalkitError):
    """An eval could not produce a trustworthy score for the cell."""

    log_tail: str = ""
    """The engine log's last lines, attached by the runner when the engine is still alive."""

"""Exec an engine so that it dies with evalkit, even when evalkit is SIGKILLed.

`python -m evalkit.engine._deathsig PARENT_PID ARGV...` sets Linux's PR_SET_PDEATHSIG to SIGKILL and execs ARGV:
the engine keeps its pid and argv, and the kernel kills it if its parent (the evalkit thread
that started it) dies without stopping it. Done in an exec wrapper rather than `preexec_fn`,
which Python documents as unsafe in a process with threads (cells run in threads).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    # evalkit passes its own pid: reading getppid() here instead would take an already reparented
    # process (evalkit SIGKILLed between fork and this line) for the parent, and the engine
    # would outlive evalkit.
    parent = int(sys.argv[1])
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the engine still runs, it just does not follow evalkit on SIGKILL
    if os.getppid() != parent:  # evalkit died before the flag was set
        sys.exit(1)
    os.execvp(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()

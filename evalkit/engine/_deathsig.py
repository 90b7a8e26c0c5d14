"""Exec an engine so that it dies with evalkit, even when evalkit is SIGKILLed, optionally
confined to some CPUs.

`python -m evalkit.engine._deathsig PARENT_PID [--cpus 0,1] ARGV...` sets Linux's PR_SET_PDEATHSIG
to SIGKILL, with `--cpus` restricts itself to those logical CPUs (`devices.kind: cpu`), and execs
ARGV: the engine keeps its pid and argv, every process it starts inherits the CPUs, and the kernel
kills it if its parent (the evalkit thread that started it) dies without stopping it. Done in an
exec wrapper rather than `preexec_fn`, which Python documents as unsafe in a process with threads
(cells run in threads); the affinity is set here, before the exec, rather than by evalkit after
the start, so not even the engine's first child can be forked outside it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
CPUS_FLAG = "--cpus"
"""Followed by a comma-separated list of logical CPU ids."""
UNPINNABLE = 3
"""The exit status when the CPUs asked for are not this machine's (the log says which are)."""


def main() -> None:
    # evalkit passes its own pid: reading getppid() here instead would take an already reparented
    # process (evalkit SIGKILLed between fork and this line) for the parent, and the engine
    # would outlive evalkit.
    parent = int(sys.argv[1])
    argv = sys.argv[2:]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the engine still runs, it just does not follow evalkit on SIGKILL
    if os.getppid() != parent:  # evalkit died before the flag was set
        sys.exit(1)
    if argv[:1] == [CPUS_FLAG]:
        cpus = {int(c) for c in argv[1].split(",")}
        argv = argv[2:]
        allowed = os.sched_getaffinity(0)
        if not cpus <= allowed:
            print(f"evalkit: devices.kind cpu: CPUs {','.join(map(str, sorted(cpus - allowed)))} are not among "
                  f"this process's CPUs {','.join(map(str, sorted(allowed)))}: lower devices.count", file=sys.stderr)
            sys.exit(UNPINNABLE)
        os.sched_setaffinity(0, cpus)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()

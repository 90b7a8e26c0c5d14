"""``--sim-gpu-gib``: the simulator holds real GPU memory, so evalkit's GPU care (evalkit/devices/)
can be watched on a real box (issue 31 part 5).

The server starts one worker process per visible device (``CUDA_VISIBLE_DEVICES``, which evalkit
sets to the cell's devices; unset: every device torch sees). Each worker takes ``gib`` GiB with a
plain torch allocation (cudaMalloc through torch's allocator, never managed memory), prints its
device's UUID (``torch.cuda.get_device_properties``) as nvidia-smi names it, optionally keeps the
GPU ``util`` % busy with matrix products, and reports ready through a pipe; the server serves only
once every worker holds its memory. A worker ends with its server: SIGTERM to the engine's process
group, or the end of a pipe only the server holds (a server killed outright).

Fault mode, ``linger_s`` > 0: the workers leave the engine's process group and session at start
(double fork, ``setsid``), so stopping the engine does not reach them, and once their server is
gone they keep their memory ``linger_s`` seconds more before exiting: a worker stuck in the driver
after its leader exited, which evalkit must wait for before the next cell starts.

``on="host"`` holds host memory instead (a bytearray, UUID ``HOST-<i>``, no torch): the same
processes, pipes and lingering on a machine without a GPU, for tests.

Nothing here imports torch in the server process: only the workers do.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from evalkit.sim.config import HOLDERS, GpuHold, Holder

READY_TIMEOUT_S = 300.0
"""Start-up of all workers (torch import, CUDA context, allocation) must finish in this time."""
POLL_S = 0.1
"""How often a worker looks whether its server is still there."""


class GpuWorkersFailed(Exception):
    """A worker did not come up (no torch, no CUDA, out of memory): one line, the server exits."""


def visible_devices(env: dict[str, str] | os._Environ[str]) -> int | None:
    """How many devices `CUDA_VISIBLE_DEVICES` leaves visible; None when it is unset (all)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    count = 0
    for part in value.split(","):
        if not part.strip() or part.strip().startswith("-"):
            break  # CUDA stops at the first invalid entry
        count += 1
    return count


def _torch_device_count() -> int:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, check=False, timeout=READY_TIMEOUT_S)
    if out.returncode != 0:
        raise GpuWorkersFailed(f"torch cannot count the GPUs: {out.stderr.strip().splitlines()[-1:]}")
    return int(out.stdout.strip())


class Workers:
    """The server's side: start the workers, wait until each holds its memory, keep the pipe
    whose end tells them the server is gone (closed by the kernel when this process ends)."""

    def __init__(self, hold: GpuHold) -> None:
        self.hold = hold
        self._life_w: int | None = None

    def start(self) -> int:
        """Start one worker per visible device and return once all hold their memory; how many."""
        hold = self.hold
        if hold.on == "cuda" and importlib.util.find_spec("torch") is None:
            raise GpuWorkersFailed(f"--sim-gpu-gib needs torch with CUDA, which {sys.executable} cannot import "
                                   "(--sim-gpu-on host holds host memory instead)")
        count = visible_devices(os.environ)
        if count is None:
            count = _torch_device_count() if hold.on == "cuda" else 1
        if count == 0:
            raise GpuWorkersFailed("--sim-gpu-gib: no device is visible (CUDA_VISIBLE_DEVICES is empty)")
        life_r, self._life_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            for index in range(count):
                argv = [sys.executable, "-m", "evalkit.sim.gpu", "--index", str(index), "--gib", str(hold.gib),
                        "--linger", str(hold.linger_s), "--util", str(hold.util_pct), "--on", hold.on,
                        "--life-fd", str(life_r), "--ready-fd", str(ready_w)]
                starter = subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(life_r, ready_w))
                if hold.linger_s > 0:
                    starter.wait()  # it forked the detached worker and left at once
        finally:
            os.close(life_r)
            os.close(ready_w)
        try:
            self._wait_ready(ready_r, count)
        finally:
            os.close(ready_r)
        return count

    @staticmethod
    def _wait_ready(ready_r: int, count: int) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        got = 0
        while got < count:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([ready_r], [], [], left)[0]:
                raise GpuWorkersFailed(f"{count - got} of {count} GPU workers not ready after {READY_TIMEOUT_S:g} s")
            chunk = os.read(ready_r, count)
            if not chunk:
                raise GpuWorkersFailed(f"{count - got} of {count} GPU workers exited before holding their memory "
                                       "(their lines above say why)")
            got += len(chunk)


# -- the worker process: python -m evalkit.sim.gpu ------------------------------------------


def _say(line: str) -> None:
    print(line, flush=True)


def _detach() -> None:
    """Leave the server's process group, session and descendants: fork, the parent exits, the
    child starts its own session (and so is reparented when the parent has gone)."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def _server_gone(life_fd: int, timeout_s: float) -> bool:
    """Whether the server's end of the pipe is closed (read gives EOF), waiting up to `timeout_s`."""
    if not select.select([life_fd], [], [], timeout_s)[0]:
        return False
    return os.read(life_fd, 1) == b""


class _CudaHold:
    def __init__(self, index: int, gib: float) -> None:
        import torch  # only here: the server never imports it

        if not torch.cuda.is_available():
            raise GpuWorkersFailed("torch sees no CUDA device")
        self.torch = torch
        self.device = torch.device("cuda", index)
        torch.cuda.set_device(self.device)
        self.block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=self.device)
        self.block.fill_(1)  # touch it: the memory is really in use, not only reserved
        props = torch.cuda.get_device_properties(self.device)
        raw = str(props.uuid)
        self.uuid = raw if raw.startswith("GPU-") else f"GPU-{raw}"
        self.name = props.name
        self._a = torch.randn(4096, 4096, device=self.device, dtype=torch.bfloat16)
        self._b = torch.randn(4096, 4096, device=self.device, dtype=torch.bfloat16)

    def busy(self, seconds: float) -> None:
        """Keep the GPU computing for about `seconds` (what utilisation telemetry sees)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(8):
                self._a @ self._b  # noqa: B018 - the work is the point
            self.torch.cuda.synchronize(self.device)

    def release(self) -> None:
        del self.block


class _HostHold:
    def __init__(self, index: int, gib: float) -> None:
        self.block: bytearray | None = bytearray(int(gib * 2**30))
        self.uuid, self.name = f"HOST-{index}", "host memory"

    def busy(self, seconds: float) -> None:
        time.sleep(seconds)

    def release(self) -> None:
        self.block = None


def work(index: int, gib: float, linger_s: float, util_pct: float, on: Holder, life_fd: int, ready_fd: int) -> int:
    """One worker's life; its exit code."""
    if linger_s > 0:
        _detach()
    tag = f"sim-gpu: worker {index} pid {os.getpid()}"
    try:
        hold: Any = _CudaHold(index, gib) if on == "cuda" else _HostHold(index, gib)
    except Exception as error:  # noqa: BLE001 - any failure is one line and the server's start-up fails
        _say(f"{tag}: error: cannot hold {gib:g} GiB on {on} device {index}: {type(error).__name__}: {error}")
        return 1
    _say(f"{tag} on device {index} uuid {hold.uuid} ({hold.name}) holds {gib:g} GiB")
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    duty = min(max(util_pct, 0.0), 100.0) / 100.0
    while True:
        if duty > 0:
            hold.busy(POLL_S * duty)
        if _server_gone(life_fd, POLL_S * (1 - duty)):
            break
    if linger_s > 0:
        _say(f"{tag}: server gone; keeping {gib:g} GiB on {hold.uuid} for {linger_s:g} s (--sim-gpu-linger)")
        time.sleep(linger_s)
    hold.release()
    _say(f"{tag}: exits")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalkit.sim.gpu",
                                     description="One GPU worker of the simulator (started by --sim-gpu-gib).")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--gib", type=float, required=True)
    parser.add_argument("--linger", type=float, default=0.0)
    parser.add_argument("--util", type=float, default=0.0)
    parser.add_argument("--on", choices=HOLDERS, default="cuda")
    parser.add_argument("--life-fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    return work(args.index, args.gib, args.linger, args.util, args.on, args.life_fd, args.ready_fd)


if __name__ == "__main__":
    sys.exit(main())

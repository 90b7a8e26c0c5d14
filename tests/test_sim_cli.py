"""The simulator's command line and start-up log lines, against real processes (e2e); its warm-up
gate, which is what its app answers, in this process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from evalkit.engine import free_port
from tests.helpers.sim import SimServer, run_sim, sim_client

FIX_LINE = "PIECEWISE: forced aiter ca_comm ({}) to unreg copy-in capture path for cudagraph-safe DP collectives."
"""ATOM's fix line (atom/model_engine/model_runner.py:2454 at ccc861dc5), `%s` the group getter."""
PIECEWISE_LINE = ("PIECEWISE cudagraph: capturing per-piece graphs (attention eager); "
                  "manual FULL whole-forward capture disabled.")
ATOM_LINE = re.compile(r"^\[atom \d\d:\d\d:\d\d\] (.*)$")
"""ATOM's logger format (atom/utils/__init__.py `getLogger`: `[%(name)s %(asctime)s] %(message)s`, `%H:%M:%S`)."""


StartSim = Callable[..., SimServer]
RunSim = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def sim_cli(sim_process: StartSim) -> RunSim:
    """`python -m evalkit.sim ARGS` run to its end (tests/helpers/sim.py, `run_sim`): a process,
    so the test is e2e (through `sim_process`)."""
    return run_sim


def banner(server: SimServer) -> list[str]:
    """The log lines up to and including the ready line."""
    lines = server.log.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("sim: ready on")) + 1]


def atom_messages(lines: list[str]) -> list[str]:
    """The messages of the lines in ATOM's own log format."""
    return [m.group(1) for line in lines if (m := ATOM_LINE.match(line))]


def test_start_up_lines_in_order_and_models_endpoint(sim_process: StartSim) -> None:
    args = ["-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "on",
            "--served-model-name", "dsv4", "--port", "9999", "--kv_cache_dtype", "fp8", "--level", "3",
            "--max-model-len", "32768", "--gpu-memory-utilization", "0.8", "--trust-remote-code"]
    server = sim_process(*args, model="deepseek-ai/DeepSeek-V4")
    lines = banner(server)
    assert lines[0] == "evalkit.sim: SIMULATED ENGINE, not a real model (seed=0, fix=on, source=flag)"
    atom = atom_messages(lines)
    assert atom[0].startswith("Engine kwargs: {'trust_remote_code': True, 'tensor_parallel_size': 8, ")
    assert "'port': 9999, 'kv_cache_dtype': 'fp8', 'max_model_len': 32768, " in atom[0]
    assert "'gpu_memory_utilization': 0.8, " in atom[0] and "'enable_dp_attention': True, " in atom[0]
    assert "level=3, " in atom[0] and "cudagraph_mode=<CUDAGraphMode.PIECEWISE: 1>, " in atom[0]
    assert atom[1:] == ["Enable dp attention, using 8 data parallel ranks", PIECEWISE_LINE,
                        FIX_LINE.format("get_dp_group"),
                        "Engine Core: cudagraph capture[512, 256, 128, 64, 48, 32, 16, 8, 4, 2, 1] cost: 0.00 seconds"]
    assert lines[-1] == f"sim: ready on {server.url}"
    assert server.url.startswith("http://127.0.0.1:")
    with server.client() as client:
        assert client.get("/health").json() == {"status": "ok"}
        models = client.get("/v1/models").json()
    assert models["object"] == "list"
    (card,) = models["data"]
    assert card["id"] == "dsv4"
    assert card["owned_by"] == "evalkit-simulator"
    assert card["simulator"] is True
    assert card["max_model_len"] == 32768
    assert card["settings"] == {"tp": 8, "dp": 1, "dp_attention": True, "expert_parallel": False,
                                "cudagraph_mode": "PIECEWISE", "fix": True, "fix_source": "flag", "seed": 0}


@pytest.mark.parametrize(
    ("args", "mode", "ran", "fix_line"),
    [
        (["--cudagraph-mode", "PIECEWISE", "--sim-fix", "off"], "PIECEWISE", "PIECEWISE", None),
        (["--cudagraph-mode", "PIECEWISE", "-tp", "8"], "PIECEWISE", "PIECEWISE", "get_tp_group"),
        (["--cudagraph-mode", "PIECEWISE"], "PIECEWISE", "PIECEWISE", None),  # one rank: no custom all-reduce
        (["--cudagraph-mode", "PIECEWISE", "--enforce-eager", "-tp", "8"], "PIECEWISE", "NONE", None),
        (["--cudagraph-mode", "PIECEWISE", "--level", "0"], "PIECEWISE", "NONE", None),
        ([], "FULL", "FULL", None),
        (["--cudagraph-mode", "FULL_AND_PIECEWISE"], "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", None),
        (["--cudagraph-mode", "PIECEWISE", "-tp", "8", "--sim-ran-mode", "FULL"], "PIECEWISE", "FULL", None),
        (["--cudagraph-mode", "FULL", "-tp", "8", "--sim-ran-mode", "PIECEWISE"], "FULL", "PIECEWISE", "get_tp_group"),
    ],
)
def test_atom_lines_follow_the_mode_run(sim_process: StartSim, args: list[str], mode: str, ran: str,
                                       fix_line: str | None) -> None:
    """Engine kwargs says what was asked; the capture lines what ran (`--sim-ran-mode` makes them differ)."""
    server = sim_process(*args)
    lines = banner(server)
    with server.client() as client:
        card = client.get("/v1/models").json()["data"][0]["settings"]
    atom = atom_messages(lines)
    assert f"cudagraph_mode=<CUDAGraphMode.{mode}: " in atom[0]
    assert (PIECEWISE_LINE in atom) is (ran in ("PIECEWISE", "FULL_AND_PIECEWISE"))
    assert any("cudagraph capture[" in line for line in atom) is (ran != "NONE")
    assert [line for line in atom if "forced aiter" in line] == ([FIX_LINE.format(fix_line)] if fix_line else [])
    assert card["cudagraph_mode"] == ran


def test_fix_from_env_and_flag_wins(sim_process: StartSim, sim_cli: RunSim) -> None:
    server = sim_process(env={"EVALKIT_SIM_FIX": "off"})
    assert "(seed=0, fix=off, source=env)" in banner(server)[0]
    server = sim_process("--sim-fix", "on", "--sim-seed", "7", env={"EVALKIT_SIM_FIX": "off"})
    assert "(seed=7, fix=on, source=flag)" in banner(server)[0]
    bad = sim_cli("--model", "m", env={"EVALKIT_SIM_FIX": "maybe"})
    assert bad.returncode == 2 and "EVALKIT_SIM_FIX must be 'on' or 'off'" in bad.stderr


def test_fix_from_module_on_pythonpath(sim_process: StartSim, tmp_path: Path) -> None:
    for value, expected in (("False", "off"), ("True", "on")):
        tree = tmp_path / value
        tree.mkdir()
        (tree / "atom_fix_marker.py").write_text(f"FORCE_UNREG_COPY_IN = {value}\n")
        args = ["--sim-fix-module", "atom_fix_marker", "-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE"]
        server = sim_process(*args, env={"PYTHONPATH": str(tree)})
        lines = banner(server)
        with server.client() as client:
            settings = client.get("/v1/models").json()["data"][0]["settings"]
        assert f"fix={expected}, source=module:atom_fix_marker)" in lines[0]
        assert any("forced aiter ca_comm (get_dp_group)" in line for line in lines) is (expected == "on")
        assert any(str(tree / "atom_fix_marker.py") in line for line in lines)
        assert settings["fix"] is (expected == "on")


def test_missing_fix_module_bad_env_and_unknown_flags_fail_clearly(sim_cli: RunSim) -> None:
    missing = sim_cli("--model", "m", "--sim-fix-module", "no_such_module_xyz")
    assert missing.returncode == 2
    assert "cannot import --sim-fix-module 'no_such_module_xyz'" in missing.stderr
    unknown = sim_cli("--model", "m", "--no-such-flag")
    assert unknown.returncode == 2 and "unrecognized arguments: --no-such-flag" in unknown.stderr
    abbreviated = sim_cli("--model", "m", "--enable-dp")
    assert abbreviated.returncode == 2
    both = sim_cli("--model", "m", "--sim-fix", "on", "--sim-fix-module", "x")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    no_model = sim_cli()
    assert no_model.returncode == 2 and "--model" in no_model.stderr


def test_help_documents_sim_flags_and_faults(sim_cli: RunSim) -> None:
    result = sim_cli("--help")
    assert result.returncode == 0
    for text in ("--sim-fix", "--sim-fix-module", "--sim-seed", "--sim-startup-seconds",
                 "--sim-warmup-seconds", "--sim-tokens-per-second", "--sim-ttft-ms", "--sim-accuracy",
                 "--sim-bug-accuracy", "--sim-collapse-rate", "--sim-natural-loop-rate", "--sim-noise", "--sim-run-noise",
                 "--sim-logprob-noise", "--sim-logprob-bug-noise",
                 "--sim-fault-after", "--sim-fault-rate", "crash-startup", "never-ready", "crash-after",
                 "hang-after", "http-500", "malformed-json", "truncated-stream", "ignore-sigterm",
                 "spawn-orphan", "fatal-log", "--server-port", "--cudagraph-mode"):
        assert text in result.stdout


def test_taken_port_fails_with_a_clear_message(sim_cli: RunSim) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = sim_cli("--model", "m", "--server-port", str(port))
    assert result.returncode == 1
    assert f"cannot bind 127.0.0.1:{port}" in result.stderr


COMPLETION = {"prompt": "hi", "max_tokens": 1}


def test_startup_seconds_hold_the_port_until_the_simulated_load_is_done(sim_process: StartSim) -> None:
    """While it "loads weights", the engine is alive but nothing listens on its port yet.

    How long start-up takes on a given box is a figure of benchmarks/sim_startup.py."""
    port = free_port()
    server = sim_process("--sim-startup-seconds", "30", "--server-port", str(port), wait=False)
    server.wait_line(r"^sim: loading weights and capturing graphs \(simulated, 30 s\)$")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert server.process is not None and server.process.poll() is None
    assert "sim: ready on" not in server.log


def test_ready_comes_no_sooner_than_the_startup_seconds_and_then_it_serves(sim_process: StartSim) -> None:
    """A lower bound only: load on the box can make start-up later, never sooner, so this cannot
    fail on a busy machine (the upper side, speed, is benchmarks/sim_startup.py's)."""
    spawned = time.monotonic()
    server = sim_process("--sim-startup-seconds", "0.5")
    with server.client() as client:
        assert time.monotonic() - spawned >= 0.5
        lines = banner(server)
        assert "sim: loading weights and capturing graphs (simulated, 0.5 s)" in lines[:-1]
        assert client.get("/health").status_code == 200
        assert client.post("/v1/completions", json=COMPLETION).status_code == 200


def test_during_warmup_health_is_200_but_completions_answer_503_uncounted() -> None:
    with sim_client("--sim-warmup-seconds", "30") as client:
        assert client.get("/health").status_code == 200
        warming = client.post("/v1/completions", json=COMPLETION)
        assert warming.status_code == 503
        assert "simulated warm-up" in warming.json()["error"]["message"]
        assert client.get("/sim/stats").json()["requests"] == 0


def test_warmup_ends_and_completions_are_served() -> None:
    with sim_client("--sim-warmup-seconds", "0.3") as client:
        deadline = time.monotonic() + 15
        while (status := client.post("/v1/completions", json=COMPLETION).status_code) == 503:
            assert time.monotonic() < deadline, "still warming up after 15 s"
            time.sleep(0.05)
        assert status == 200
        assert client.get("/sim/stats").json()["requests"] == 1  # the 503s were not admitted


def test_sigterm_stops_the_server_mid_stream_without_finishing_the_stream(sim_process: StartSim) -> None:
    """4,096 tokens at 20 a second would stream for 200 s; SIGTERM ends the process long before.

    How fast it stops is a figure of benchmarks/sim_startup.py."""
    server = sim_process("--sim-tokens-per-second", "20")
    with server.client() as client:
        body = {"prompt": "Write a long story.", "max_tokens": 4096, "stream": True}
        received: list[str] = []
        with client.stream("POST", "/v1/completions", json=body) as response:
            lines = response.iter_lines()
            received.append(next(lines))
            os.kill(server.pid, signal.SIGTERM)
            assert server.exit_code(timeout=20) == -signal.SIGTERM
            with contextlib.suppress(httpx.HTTPError):  # a cut chunked body may also end in an error
                received.extend(lines)
    assert received[0].startswith("data: {")
    assert "data: [DONE]" not in received

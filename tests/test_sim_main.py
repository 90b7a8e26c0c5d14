"""`python -m evalkit.sim`'s command line (sim/__main__.py, sim/process.py), run in this process for
what it decides before it serves: where the fix comes from (the flag over the environment over
the default, or a source tree's marker module), and the start-ups that end in an exit code
(a bad combination 2, the crash-startup fault 3, a port it cannot bind 1, GPU workers that
cannot start 4), each with its line on stderr. Serving, signals and a real port's clients need
the simulator as a process: tests/test_sim_cli.py and test_sim_faults.py, in `e2e`.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

import pytest

from evalkit.sim.__main__ import EXIT_CONFIG, FIX_ENV, configure, main
from evalkit.sim.config import SimConfigError
from evalkit.sim.process import EXIT_BIND, EXIT_CRASH_STARTUP, EXIT_GPU_WORKERS

BUGGY = ("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE")


def test_the_fix_comes_from_the_flag_over_the_environment_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FIX_ENV, raising=False)
    config, path, _ = configure(["--model", "m", *BUGGY])
    assert (config.cell.fix, config.fix_source, path) == (True, "default", None)
    monkeypatch.setenv(FIX_ENV, "OFF")
    config, _, _ = configure(["--model", "m", *BUGGY])
    assert (config.cell.fix, config.fix_source, config.cell.buggy) == (False, "env", True)
    config, _, _ = configure(["--model", "m", "--sim-fix", "on", *BUGGY])
    assert (config.cell.fix, config.fix_source) == (True, "flag")
    monkeypatch.setenv(FIX_ENV, "maybe")
    with pytest.raises(SimConfigError, match="EVALKIT_SIM_FIX must be 'on' or 'off', not 'maybe'"):
        configure(["--model", "m"])


@pytest.mark.parametrize(("value", "fix"), [("True", True), ("False", False), (None, False)])
def test_a_source_tree_s_marker_module_decides_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      value: str | None, fix: bool) -> None:
    """The module's FORCE_UNREG_COPY_IN, as imported from the engine's PYTHONPATH; a tree from
    before the fix does not know the name (fix off)."""
    name = f"atom_fix_marker_{value or 'absent'}_{tmp_path.name}".lower()
    (tmp_path / f"{name}.py").write_text("" if value is None else f"FORCE_UNREG_COPY_IN = {value}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    config, path, _ = configure(["--model", "m", "--sim-fix-module", name, *BUGGY])
    assert (config.cell.fix, config.fix_source, path) == (fix, f"module:{name}", str(tmp_path / f"{name}.py"))
    with pytest.raises(SimConfigError, match="cannot import --sim-fix-module 'no_such_module_xyz'"):
        configure(["--model", "m", "--sim-fix-module", "no_such_module_xyz"])


def test_a_combination_atom_refuses_is_exit_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "m", "--sim-dialect", "atom", "--served-model-name", "x"]) == EXIT_CONFIG
    assert capsys.readouterr().err == ("evalkit.sim: error: --served-model-name: ATOM at 0e9804c21/ccc861dc5 has no "
                                       "such flag (--sim-dialect atom serves the --model string)\n")


def test_the_crash_startup_fault_exits_3_after_announcing_itself_and_never_binds(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FIX_ENV, raising=False)
    assert main(["--model", "m", "--server-port", "0", "--sim-fault", "crash-startup"]) == EXIT_CRASH_STARTUP
    out, err = capsys.readouterr()
    assert out.startswith("evalkit.sim: SIMULATED ENGINE, not a real model (seed=0, fix=on, source=default)")
    assert "sim: model=m served as m, tp=1 dp=1" in out and "ready on" not in out
    assert err.endswith("sim: fatal: simulated start-up failure (--sim-fault crash-startup)\n")


def test_a_port_already_taken_is_exit_1_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["--model", "m", "--server-port", str(port)]) == EXIT_BIND
    assert f"evalkit.sim: error: cannot bind 127.0.0.1:{port}: " in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is importable here")
def test_gpu_workers_without_torch_exit_4_saying_what_to_use_instead(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "m", "--server-port", "0", "--sim-gpu-gib", "0.01"]) == EXIT_GPU_WORKERS
    err = capsys.readouterr().err
    assert "sim: fatal: --sim-gpu-gib needs torch with CUDA" in err and "(--sim-gpu-on host holds host memory instead)" in err


def test_no_visible_device_is_exit_4(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["--model", "m", "--server-port", "0", "--sim-gpu-gib", "0.01", "--sim-gpu-on", "host"]) == EXIT_GPU_WORKERS
    assert "no device is visible (CUDA_VISIBLE_DEVICES is empty)" in capsys.readouterr().err

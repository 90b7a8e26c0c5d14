"""build_launch: the exact argv and environment a cell's engine starts with (and the plan shows)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import parse_config
from evalkit.config.cells import expand
from evalkit.engine import PORT_PLACEHOLDER, CellLaunch, build_launch
from evalkit.errors import ConfigError
from evalkit.redact import REDACTED

SAFE = {"PYTHONSAFEPATH": "1"}
"""Every `python -m` engine starts with it: the working directory is not put first on sys.path."""


def launch_of(engine: dict[str, Any], port: int | str = 8000, top: dict[str, Any] | None = None,
              source_dir: Path | None = None, devices: tuple[int, ...] | None = None) -> CellLaunch:
    """The launch of the only cell of a config with this `engine` section (and `top` keys)."""
    config = parse_config({"model": "m", "engine": {"python": "py", **engine}, **(top or {})}, "cfg.yaml")
    return build_launch(config, expand(config)[0], port, source_dir=source_dir, devices=devices)


# Device visibility: set only when the box declares devices and the cell was given some.

@pytest.mark.parametrize(("profile", "variable"), [
    ("atom", "HIP_VISIBLE_DEVICES"), ("vllm", "CUDA_VISIBLE_DEVICES"), ("sglang", "CUDA_VISIBLE_DEVICES"),
    ("sim", "CUDA_VISIBLE_DEVICES"),
])
def test_given_devices_are_made_visible_through_the_profiles_variable(profile: str, variable: str) -> None:
    launch = launch_of({"profile": profile}, top={"devices": {"count": 4}}, devices=(2, 3))
    assert launch.env == {variable: "2,3", **SAFE}


def test_the_config_can_name_the_visibility_variables() -> None:
    top = {"devices": {"count": 4, "visibility_env": ["ROCR_VISIBLE_DEVICES", "MY_DEVICES"]}}
    launch = launch_of({"profile": "atom"}, top=top, devices=(1,))
    assert launch.env == {"ROCR_VISIBLE_DEVICES": "1", "MY_DEVICES": "1", **SAFE}


def test_no_visibility_variable_without_declared_devices() -> None:
    """Without a `devices:` section the box's devices are not evalkit's to hand out."""
    assert launch_of({"profile": "vllm"}, devices=(0,)).env == SAFE
    assert launch_of({"profile": "vllm"}, top={"devices": {"count": 4}}).env == SAFE


# devices.kind cpu: the cell's CPUs pin its engine; no GPU variable is set unless the config names one.

def test_cpu_devices_pin_the_engine_and_set_no_gpu_variable() -> None:
    launch = launch_of({"profile": "vllm"}, top={"devices": {"count": 2, "kind": "cpu"}}, devices=(1,))
    assert launch.cpus == (1,) and launch.env == SAFE
    assert launch.display([])["cpus"] == [1]


def test_cpu_devices_can_also_set_a_named_variable() -> None:
    top = {"devices": {"count": 4, "kind": "cpu", "visibility_env": ["VLLM_CPU_OMP_THREADS_BIND"]}}
    launch = launch_of({"profile": "vllm"}, top=top, devices=(2, 3))
    assert launch.cpus == (2, 3) and launch.env == {"VLLM_CPU_OMP_THREADS_BIND": "2,3", **SAFE}


def test_gpu_devices_pin_no_cpus() -> None:
    launch = launch_of({"profile": "vllm"}, top={"devices": {"count": 4}}, devices=(2, 3))
    assert launch.cpus is None and "cpus" not in launch.display([])


def test_cpu_devices_under_slurm_are_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="devices.kind: cpu pins engines to this machine's CPUs"):
        launch_of({"profile": "vllm"}, top={"devices": {"count": 2, "kind": "cpu"}, "executor": {"kind": "slurm"}})


# Source tree: a checked-out worktree goes first on PYTHONPATH, ahead of what was there.

def test_source_dir_goes_first_on_the_inherited_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", "/site/extra")
    launch = launch_of({"profile": "sim"}, source_dir=tmp_path)
    assert launch.env == {"PYTHONPATH": os.pathsep.join([str(tmp_path), "/site/extra"]), **SAFE}


def test_source_dir_goes_first_on_the_configs_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", "/site/extra")
    launch = launch_of({"profile": "sim", "env": {"PYTHONPATH": "/cfg/path"}}, source_dir=tmp_path)
    assert launch.env["PYTHONPATH"] == os.pathsep.join([str(tmp_path), "/cfg/path"])


def test_source_dir_alone_when_nothing_was_on_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert launch_of({"profile": "sim"}, source_dir=tmp_path).env == {"PYTHONPATH": str(tmp_path), **SAFE}


def test_no_source_dir_leaves_pythonpath_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/site/extra")
    assert launch_of({"profile": "sim", "env": {"A": "1"}}).env == {"A": "1", **SAFE}


# The command profile: the config's argv template, placeholders substituted, no shell.

def test_command_template_substitutes_every_placeholder() -> None:
    engine = {"profile": "command", "host": "0.0.0.0", "args": ["--extra", "$HOME"],
              "command": ["{python}", "serve.py", "--bind={host}:{port}", "{model}", "--as", "{served_name}", "a b;c"]}
    config = parse_config({"model": "/models/tiny", "served_name": "tiny", "engine": {"python": "py", **engine}}, "cfg.yaml")
    launch = build_launch(config, expand(config)[0], 1234)
    assert launch.argv == ["py", "serve.py", "--bind=0.0.0.0:1234", "/models/tiny", "--as", "tiny", "a b;c",
                           "--extra", "$HOME"]
    assert launch.base_url == "http://0.0.0.0:1234"


def test_command_template_while_planning_shows_the_port_placeholder() -> None:
    launch = launch_of({"profile": "command", "command": ["srv", "--port", "{port}"]}, port=PORT_PLACEHOLDER)
    assert launch.argv == ["srv", "--port", PORT_PLACEHOLDER]


def test_command_profile_needs_a_template() -> None:
    with pytest.raises(ConfigError, match=r"^engine\.command: the command profile needs an argv template$"):
        launch_of({"profile": "command"})


def test_command_profile_has_no_logical_settings() -> None:
    """A setting the template cannot express would be silently ignored: it is an error instead."""
    with pytest.raises(ConfigError, match=r"profile command: does not support setting\(s\) tensor_parallel "
                                          r"\(supported: none; use args instead\)"):
        launch_of({"profile": "command", "command": ["srv"], "settings": {"tensor_parallel": 2}})


# Settings a profile cannot express are bad input, named with what it does support.

def test_unsupported_settings_name_the_supported_ones() -> None:
    with pytest.raises(ConfigError, match=r"profile atom: does not support setting\(s\) max_num_seqs \(supported: "
                                          r"data_parallel, dp_attention, expert_parallel, graph_mode, tensor_parallel;"):
        launch_of({"profile": "atom", "settings": {"max_num_seqs": 4, "tensor_parallel": 2}})


def test_devices_is_a_setting_for_evalkit_not_the_engine() -> None:
    assert launch_of({"profile": "atom", "settings": {"devices": 2}}).argv[:3] == ["py", "-m", "atom.entrypoints.openai_server"]


# What may be shown or stored: secrets redacted; what is launched: the real values.

def test_display_redacts_secrets_but_the_launch_keeps_them() -> None:
    engine = {"profile": "vllm", "args": ["--api-key", "sk-real", "--hf-token=hf-real"],
              "env": {"HF_TOKEN": "hf-env", "MY_PRIVATE": "mine", "PLAIN": "1"}}
    launch = launch_of(engine, top={"secret_env": ["MY_PRIVATE"]})
    shown = launch.display(["MY_PRIVATE"])
    assert shown["argv"][-3:] == ["--api-key", REDACTED, f"--hf-token={REDACTED}"]
    assert shown["env"] == {"HF_TOKEN": REDACTED, "MY_PRIVATE": REDACTED, "PLAIN": "1", **SAFE}
    assert shown["port"] == 8000 and shown["host"] == "127.0.0.1" and shown["health_path"] == "/health"
    assert launch.argv[-3:] == ["--api-key", "sk-real", "--hf-token=hf-real"]
    assert launch.env == {"HF_TOKEN": "hf-env", "MY_PRIVATE": "mine", "PLAIN": "1", **SAFE}


# Readiness and failure lines: the profile's, extended or overridden by the config.

def test_health_path_and_fatal_patterns_come_from_the_profile_and_the_config() -> None:
    launch = launch_of({"profile": "sglang", "fatal_patterns": ["my fault"]})
    assert launch.health_path == "/health_generate"
    assert launch.fatal_patterns[-1] == "my fault" and len(launch.fatal_patterns) > 1
    assert launch_of({"profile": "sglang", "health_path": "/ping"}).health_path == "/ping"


# The engine starts in an empty directory: paths a config gives relative to where evalkit runs
# keep that meaning, made absolute at launch build when they exist there.

def test_relative_paths_that_exist_where_evalkit_runs_are_made_absolute(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "serve.py").write_text("")
    (tmp_path / "prompts.txt").write_text("")
    config = parse_config({"model": "models/tiny", "engine": {
        "profile": "command", "python": "venv/bin/python", "args": ["--prompts", "prompts.txt", "--dtype=prompts.txt"],
        "command": ["{python}", "serve.py", "--model", "{model}", "--port", "{port}", "--as", "{served_name}"]}},
        "cfg.yaml")
    launch = build_launch(config, expand(config)[0], 8000)
    assert launch.argv == [f"{tmp_path}/venv/bin/python", f"{tmp_path}/serve.py", "--model", f"{tmp_path}/models/tiny",
                           "--port", "8000", "--as", "models/tiny", "--prompts", f"{tmp_path}/prompts.txt",
                           "--dtype=prompts.txt"]
    assert launch.python == f"{tmp_path}/venv/bin/python"  # the venv's link, not what it points to


def test_names_that_are_not_paths_here_reach_the_engine_verbatim(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse_config({"model": "deepseek-ai/DeepSeek-V4-Pro", "engine": {"profile": "vllm", "python": "python3"}},
                          "cfg.yaml")
    launch = build_launch(config, expand(config)[0], 8000)
    assert launch.argv[:5] == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
                               "deepseek-ai/DeepSeek-V4-Pro"]


def test_the_command_profile_keeps_the_script_directory_on_sys_path() -> None:
    """`python serve.py` imports what lies beside it; PYTHONSAFEPATH would take that away."""
    assert launch_of({"profile": "command", "command": ["{python}", "serve.py"]}).env == {}


# The package that proves the tree, and where it lives in a checkout.

def test_sglang_s_package_directory_is_the_checkout_s_python_folder(tmp_path: Path) -> None:
    launch = launch_of({"profile": "sglang", "source": {"repo": "/r", "ref": "a"}}, source_dir=tmp_path)
    assert (launch.package, launch.tree) == ("sglang", tmp_path / "python")
    assert launch.env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "python")


def test_a_source_names_its_own_subdirectory_and_a_config_its_own_package(tmp_path: Path) -> None:
    launch = launch_of({"profile": "sglang", "source": {"repo": "/r", "ref": "a", "subdir": ""}}, source_dir=tmp_path)
    assert launch.tree == tmp_path
    launch = launch_of({"profile": "command", "package": "myserver", "command": ["srv"],
                        "source": {"repo": "/r", "ref": "a", "subdir": "src"}}, source_dir=tmp_path)
    assert (launch.package, launch.tree) == ("myserver", tmp_path / "src")
    assert (launch_of({"profile": "vllm"}).package, launch_of({"profile": "vllm"}).tree) == ("vllm", None)
    assert launch_of({"profile": "command", "command": ["srv"]}).package is None


@pytest.mark.parametrize("subdir", ["../elsewhere", "/abs", "python/../../x"])
def test_a_subdirectory_must_stay_inside_the_checkout(subdir: str) -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.yaml: engine\.source\.subdir: must be a path inside the checkout"):
        launch_of({"profile": "sglang", "source": {"repo": "/r", "ref": "a", "subdir": subdir}})

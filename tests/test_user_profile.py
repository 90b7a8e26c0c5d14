"""A user profile loads from a config (`engine.profile: module.path:ATTR`) with no edit to evalkit."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.config import parse_config
from evalkit.config.cells import expand
from evalkit.engine import build_launch
from evalkit.errors import ConfigError
from evalkit.profiles import get_profile

USER_MODULE = '''
from evalkit.profiles import Launch, Profile


def my_flags(settings, launch: Launch) -> list[str]:
    flags = ["--listen", f"{launch.host}:{launch.port}", "--weights", launch.model]
    if settings.tensor_parallel is not None:
        flags += ["--shards", str(settings.tensor_parallel)]
    return flags


PROFILE = Profile(
    name="mine",
    entrypoint=("{python}", "-m", "my_server"),
    flags=my_flags,
    health_path="/ready",
    fatal_patterns=("my server died",),
    settings_supported=frozenset({"tensor_parallel"}),
)


def make_profile() -> Profile:
    return PROFILE


def needs_an_argument(name):
    return PROFILE


def returns_a_string():
    return "PROFILE"


def raises():
    raise RuntimeError("no GPU here\\nsecond line")


NOT_A_PROFILE = {"name": "mine"}
'''


@pytest.fixture
def mymod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`mymod` (a user's profiles) and `broken` (a module that fails to import) on sys.path."""
    (tmp_path / "mymod.py").write_text(USER_MODULE)
    (tmp_path / "broken.py").write_text("raise ImportError('needs my_server installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("mymod", None)


def launch_of(profile: str, **engine: object):  # type: ignore[no-untyped-def]
    config = parse_config({
        "model": "/models/tiny", "served_name": "tiny",
        "engine": {"profile": profile, "python": "py", **engine},
        "axes": {"tp": {"tp2": {"settings": {"tensor_parallel": 2}}}},
    }, "cfg.yaml")
    return build_launch(config, expand(config)[0], 4321)


@pytest.mark.parametrize("attr", ["PROFILE", "make_profile"])
def test_a_user_profile_builds_its_own_argv(mymod: None, attr: str) -> None:
    launch = launch_of(f"mymod:{attr}", args=["--verbose"])
    assert launch.argv == ["py", "-m", "my_server", "--listen", "127.0.0.1:4321", "--weights", "/models/tiny",
                           "--shards", "2", "--verbose"]
    assert launch.health_path == "/ready"
    assert launch.fatal_patterns == ("my server died",)
    assert launch.profile.name == "mine"


def test_a_user_profile_gets_the_default_capabilities(mymod: None) -> None:
    """An engine evalkit does not know is a real one: it takes the device lock and is not simulated."""
    profile = get_profile("mymod:PROFILE")
    assert profile.uses_devices and not profile.simulated


def test_a_user_profile_rejects_settings_it_does_not_declare(mymod: None) -> None:
    with pytest.raises(ConfigError, match=r"profile mine: does not support setting\(s\) graph_mode"):
        launch_of("mymod:PROFILE", settings={"graph_mode": "eager"})


def test_built_ins_load_the_same_way() -> None:
    assert get_profile("evalkit.profiles.vllm:PROFILE") is get_profile("vllm")


@pytest.mark.parametrize(("value", "why"), [
    ("nomodule:X", "cannot import 'nomodule': ModuleNotFoundError: No module named 'nomodule'"),
    ("broken:PROFILE", "cannot import 'broken': ImportError: needs my_server installed"),
    ("mymod:missing", "module 'mymod' has no attribute 'missing'"),
    ("mymod:NOT_A_PROFILE", "NOT_A_PROFILE is a dict, not a Profile or a zero-argument callable returning one"),
    ("mymod:needs_an_argument", "needs_an_argument is a function, not a Profile"),
    ("mymod:returns_a_string", "returns_a_string() returned a str, not a Profile"),
    ("mymod:raises", "raises() failed: RuntimeError: no GPU here"),
    ("mymod:", "expected a built-in name or module.path:ATTR"),
    (":PROFILE", "expected a built-in name or module.path:ATTR"),
])
def test_a_bad_user_profile_is_one_line_naming_engine_profile(mymod: None, value: str, why: str) -> None:
    with pytest.raises(ConfigError) as error:
        launch_of(value)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"engine.profile: {value!r}: ")
    assert why in message


def test_an_unknown_plain_name_lists_the_built_ins() -> None:
    with pytest.raises(ConfigError, match=re.escape(
            "engine.profile: unknown profile 'trt' (known: atom, command, sglang, sim, sim-atom, vllm)")):
        get_profile("trt")

"""Config loading: valid configs load, every kind of bad input is one line naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.config import find_config, load_config, parse_config
from evalkit.errors import ConfigError
from tests.conftest import CONFIGS, write_config

MINIMAL = """
model: m
engine: {profile: sim}
axes:
  graph:
    full: {settings: {graph_mode: FULL}}
    eager: {settings: {graph_mode: eager}}
"""


@pytest.mark.parametrize("name", ["demo", "deepseek-v4"])
def test_shipped_configs_load(name: str) -> None:
    config = load_config(CONFIGS / f"{name}.yaml")
    assert list(config.axes) == ["parallel", "graph", "fix"]
    assert config.ab is not None and (config.ab.on, config.ab.off) == ("fixon", "fixoff")


def test_on_and_off_are_strings_not_yaml11_booleans(tmp_path: Path) -> None:
    path = write_config(tmp_path, MINIMAL + "ab: {axis: graph, on: full, off: eager}\n")
    assert load_config(path).ab.on == "full"  # type: ignore[union-attr]


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(write_config(tmp_path, text))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "cfg.yaml"))
    return message


def test_unknown_key_is_an_error_naming_its_path(tmp_path: Path) -> None:
    message = error_of(tmp_path, MINIMAL.replace("graph_mode: FULL", "graph_mode: FULL, tensor_paralel: 8"))
    assert "axes.graph.full.settings.tensor_paralel: unknown key" in message


def test_wrong_type_names_field_and_value(tmp_path: Path) -> None:
    message = error_of(tmp_path, MINIMAL.replace("graph_mode: FULL", "graph_mode: FOO"))
    assert "axes.graph.full.settings.graph_mode" in message and "'FOO'" in message


def test_malformed_yaml_gives_line(tmp_path: Path) -> None:
    assert "line" in error_of(tmp_path, "model: [unclosed\nengine: {profile: sim}\n")


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    text = MINIMAL + "    full: {settings: {graph_mode: PIECEWISE}}\n"
    assert "duplicate key 'full'" in error_of(tmp_path, text)


def test_axis_value_that_names_nothing(tmp_path: Path) -> None:
    assert "at least one of" in error_of(tmp_path, MINIMAL.replace("{settings: {graph_mode: eager}}", "{}"))


def test_baseline_must_name_a_value_of_every_axis(tmp_path: Path) -> None:
    assert "is not a value of graph" in error_of(tmp_path, MINIMAL + "baseline: {graph: piecewise}\n")
    assert "is not an axis" in error_of(tmp_path, MINIMAL + "baseline: {mode: full}\n")


def test_threshold_needs_exactly_one_check(tmp_path: Path) -> None:
    text = MINIMAL + "thresholds: [{metric: gsm8k.flexible, min: 0.9, max: 1.0}]\n"
    assert "set exactly one of" in error_of(tmp_path, text)


def test_missing_file_and_unknown_model() -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(Path("/nonexistent/x.yaml"))
    with pytest.raises(ConfigError, match="no configs/nope.yaml .*known: .*demo"):
        find_config("nope", CONFIGS.parent)
    with pytest.raises(ConfigError, match="letters, digits"):
        find_config("../etc/passwd")


def test_find_config_prefers_project_then_package(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.yaml").write_text(MINIMAL)
    assert find_config("demo", tmp_path) == tmp_path / "configs" / "demo.yaml"
    assert find_config("deepseek-v4", tmp_path).name == "deepseek-v4.yaml"  # shipped copy


yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)
keys = st.sampled_from(["model", "engine", "axes", "baseline", "ab", "evals", "thresholds", "exclude", "timeouts"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(keys, yaml_values, max_size=6))
def test_fuzzed_configs_fail_only_with_config_errors(data: dict[str, object]) -> None:
    try:
        parse_config(data, "fuzz.yaml")
    except ConfigError as e:
        lines = str(e).splitlines()  # every error listed, one line each naming the file
        assert lines and all(line.startswith("fuzz.yaml: ") for line in lines)

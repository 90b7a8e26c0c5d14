"""Matrix expansion: cells, ids, exclusions, selections, baseline and A/B twins."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.config import load_config
from evalkit.config.cells import ab_twin, baseline_cell, expand, select
from evalkit.errors import ConfigError
from tests.conftest import CONFIGS, write_config


def test_demo_expands_to_twelve_cells_with_stable_ids() -> None:
    cells = expand(load_config(CONFIGS / "demo.yaml"))
    assert len(cells) == 12
    assert cells[0].id == "tp8-full-fixon" and cells[-1].id == "dp8-eager-fixoff"
    dp_pw_off = next(c for c in cells if c.id == "dp8-piecewise-fixoff")
    assert dp_pw_off.settings.dp_attention and dp_pw_off.settings.graph_mode == "PIECEWISE"
    assert dp_pw_off.args[-2:] == ("--sim-fix", "off")


def test_baseline_and_ab_twin() -> None:
    config = load_config(CONFIGS / "demo.yaml")
    cells = expand(config)
    assert baseline_cell(cells, config).id == "tp8-full-fixon"  # type: ignore[union-attr]
    off = next(c for c in cells if c.id == "dp8-piecewise-fixoff")
    assert ab_twin(off, cells, config).id == "dp8-piecewise-fixon"  # type: ignore[union-attr]
    assert ab_twin(baseline_cell(cells, config), cells, config) is None  # type: ignore[arg-type]


def test_only_selects_and_rejects() -> None:
    config = load_config(CONFIGS / "demo.yaml")
    cells = expand(config)
    assert [c.id for c in select(cells, ("parallel=dp8,graph=piecewise",), config)] == [
        "dp8-piecewise-fixon", "dp8-piecewise-fixoff"]
    assert len(select(cells, ("graph=full|eager", "fix=fixoff"), config)) == 10
    with pytest.raises(ConfigError, match="'mode' is not an axis"):
        select(cells, ("mode=x",), config)
    with pytest.raises(ConfigError, match="graph=cuda is not a value"):
        select(cells, ("graph=cuda",), config)


def test_exclude_and_everything_excluded(tmp_path: Path) -> None:
    base = load_config(CONFIGS / "demo.yaml").model_dump()
    base["exclude"] = [{"graph": "eager", "fix": "fixoff"}]
    from evalkit.config import parse_config

    assert len(expand(parse_config(base, "x"))) == 10
    base["exclude"] = [{"fix": ["fixon", "fixoff"]}]
    with pytest.raises(ConfigError, match="every cell"):
        expand(parse_config(base, "x"))


def test_baseline_that_is_excluded_is_an_error() -> None:
    from evalkit.config import parse_config

    base = load_config(CONFIGS / "demo.yaml").model_dump()
    base["exclude"] = [{"parallel": "tp8", "graph": "full"}]
    config = parse_config(base, "x")
    with pytest.raises(ConfigError, match="baseline: .* is not a cell"):
        baseline_cell(expand(config), config)


def test_two_axes_setting_the_source_is_an_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, """
model: m
engine: {profile: sim}
axes:
  a: {x: {source: {repo: /r, ref: a}}}
  b: {y: {source: {repo: /r, ref: b}}}
""")
    with pytest.raises(ConfigError, match="axis a also sets the engine source"):
        expand(load_config(path))

"""An eval outside evalkit is named in a config, like a user profile (`module.path:ATTR`), and runs
through a real matrix with no edit to evalkit and no registration (tests/plugin_evals.py).

Validating such a config loads the eval and registers it nowhere: the config's own set of evals
(``config.evals.evalset``) holds it, and the run, its verdict and its report are given that set, so
which evals and metrics exist for any other config stays the same. A report of the stored run
resolves the set again from what the run recorded; where the plugin cannot be imported it shows
the summary as the run wrote it and says so.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.config import parse_config
from evalkit.errors import ConfigError
from evalkit.evals import registry
from evalkit.store import read_json, read_jsonl, write_json
from tests.helpers.sim import FIX_AB
from tests.plugin_evals import EVAL, EchoSettings

PLUGIN = "tests.plugin_evals:EVAL"
CONFIG = f"""\
model: sim/plugin
engine:
  profile: sim
  args: ["--sim-startup-seconds", "0.1", "--sim-seed", "0"]
{FIX_AB}
evals:
  plugins: ["{PLUGIN}"]
  gsm8k: {{enabled: false}}
  repetition: {{enabled: false}}
  echo: {{prompts: 3}}
thresholds:
  - {{metric: echo.chars, min: 1000}}
timeouts: {{startup: 60, stop_grace: 5}}
"""
BASE: dict[str, Any] = {"model": "m", "engine": {"profile": "sim"}}


def with_evals(evals: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), "evals": evals, **more}


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One two-cell matrix running only the plugin (2 engine starts, 3 questions each). The tests that
    read it are about that real run, so each asks for `engine_processes`: e2e."""
    tmp_path = tmp_path_factory.mktemp("plugin")
    config = tmp_path / "plugin.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    result = CliRunner().invoke(main, ["matrix", "--config", str(config), "--run-id", "plugin",
                                       "--results-dir", str(tmp_path / "results"), "--no-history", "--quiet"])
    return tmp_path / "results" / "plugin", result


def test_an_eval_named_in_a_config_runs_in_every_cell_and_is_compared(
        plugin_run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, result = plugin_run
    summary = read_json(run_path / "summary.json")
    assert [c["status"] for c in summary["cells"]] == ["ok", "ok"], result.output
    for cell in summary["cells"]:
        assert cell["metrics"]["echo.chars"] > 0 and cell["metrics"]["echo.n"] == 3
        assert [s["id"] for s in read_jsonl(run_path / cell["id"] / "echo.samples.jsonl")] == ["q-0", "q-1", "q-2"]
    off = summary["cells"][1]
    assert off["vs_ab"]["echo.answered"]["n"] == 3  # paired on its three questions, from its samples file
    assert "echo.chars" in [m["name"] for m in summary["metrics"]]
    assert [(f["metric"], f["check"]) for c in summary["cells"] for f in c["flags"]] == [("echo.chars", "min")] * 2
    assert result.exit_code == 1  # the threshold on its metric failed, like any other


def test_its_report_shows_it_from_the_runs_own_evals(plugin_run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, _ = plugin_run
    assert "| chars/answer |" in (run_path / "table.md").read_text(encoding="utf-8")
    csv = CliRunner().invoke(main, ["report", "plugin", "--format", "csv", "--results-dir", str(run_path.parent)])
    assert "echo.chars" in csv.output.splitlines()[0].split(",")
    assert registry.builtins().get("echo") is None and "echo.chars" not in [s.name for s in registry.builtins().metrics()]


def test_its_report_without_the_plugin_shows_what_the_run_recorded_and_says_so(
        plugin_run: tuple[Path, Any], tmp_path: Path, engine_processes: None) -> None:
    run_path, _ = plugin_run
    moved = tmp_path / "results" / "plugin"
    shutil.copytree(run_path, moved)
    info = read_json(moved / "run.json")
    info["config"]["evals"]["plugins"] = ["gone_plugin_pkg.evals:EVAL"]  # the package is not installed here
    write_json(moved / "run.json", info)
    runner = CliRunner()
    with_plugin = runner.invoke(main, ["report", "plugin", "--format", "csv", "--results-dir", str(run_path.parent)])
    without = runner.invoke(main, ["report", "plugin", "--format", "csv", "--results-dir", str(moved.parent)])
    assert without.exit_code == 1, without.output  # the run's own code: its echo.chars min failed
    recorded, full = (list(csv.DictReader(io.StringIO(r.stdout))) for r in (without, with_plugin))
    assert [(r["cell"], r["echo.chars"], r["echo.answered"], r["vs_ab.echo.answered.p_value"]) for r in recorded] == [
        (r["cell"], r["echo.chars"], r["echo.answered"], r["vs_ab.echo.answered.p_value"]) for r in full]
    assert "echo.n" not in recorded[0]  # a CSV column the eval's code adds (`csv_fields`): not recorded
    assert ("evals.plugins[0]: 'gone_plugin_pkg.evals:EVAL': cannot import 'gone_plugin_pkg.evals'" in without.stderr
            and "showing summary.json as the run wrote it, not recomputed" in without.stderr)
    markdown = runner.invoke(main, ["report", "plugin", "--format", "markdown", "--results-dir", str(moved.parent)])
    assert "| chars/answer |" in markdown.stdout and "echo.chars" in markdown.stdout
    (moved / "summary.json").unlink()
    gone = runner.invoke(main, ["report", "plugin", "--format", "csv", "--results-dir", str(moved.parent)])
    assert gone.exit_code != 0 and "summary.json is absent: nothing to report without that eval" in gone.output


def test_validating_a_config_that_names_it_registers_nothing() -> None:
    before = registry.builtins().metrics()
    config = parse_config(with_evals({"plugins": [PLUGIN], "echo": {"prompts": 4}},
                                     thresholds=[{"metric": "echo.chars", "min": 1}]), "cfg.yaml")
    assert isinstance(config.evals.echo, EchoSettings) and config.evals.echo.prompts == 4
    assert config.thresholds[0].spec is not None and config.thresholds[0].spec.display.label == "characters per answer"
    assert [ev.name for ev, _ in config.evals.enabled()] == ["gsm8k", "repetition", "echo"]  # its set: built-ins, then it
    assert config.evals.evalset.get("echo") is EVAL and config.evals.evalset.eval_of("echo.chars") is EVAL
    assert registry.builtins().metrics() == before and registry.builtins().get("echo") is None
    named_only = parse_config(with_evals({"plugins": [PLUGIN]}), "cfg.yaml")
    assert named_only.evals.echo == EchoSettings()  # naming it runs it, with its defaults
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.echo: unknown key"):
        parse_config(with_evals({"echo": {}}), "cfg.yaml")  # a config that does not name it


def test_its_history_reads_its_cells_by_the_runs_own_evals(plugin_run: tuple[Path, Any], tmp_path: Path,
                                                           engine_processes: None) -> None:
    run_path, _ = plugin_run
    args = ["history", "--db", str(tmp_path / "h.db"), "--results-dir", str(run_path.parent), "--model", "sim/plugin"]
    imported = CliRunner().invoke(main, [*args, "--import", "plugin", "--format", "csv"])
    assert imported.exit_code == 0, imported.output
    rows = list(csv.DictReader(io.StringIO(imported.stdout)))
    assert [float(r["echo.chars"]) > 0 for r in rows] == [True, True]  # imported with the run's evals: flattened
    dashboard = json.loads(CliRunner().invoke(main, [*args, "--format", "benchmark-json"]).stdout)
    assert {"fixon echo.chars", "fixoff echo.answered"} <= {e["name"] for e in dashboard}  # its specs give the direction


def test_a_stored_run_resolves_its_evals_from_what_it_recorded() -> None:
    found = registry.recorded({"config": {"evals": {"plugins": [PLUGIN, "gone_pkg:EVAL"]}}})
    assert [ev.name for ev in found] == [ev.name for ev in registry.builtins()] + ["echo"]
    assert found.get("echo") is EVAL and found.eval_of("echo.answered") is EVAL
    assert found.missing == ("evals.plugins[1]: 'gone_pkg:EVAL': cannot import 'gone_pkg': ModuleNotFoundError: "
                             "No module named 'gone_pkg'",)  # said in its report, never raised
    assert registry.recorded({"config": {"model": "m"}}) == registry.builtins()  # a run that named none


@pytest.mark.parametrize(("ref", "why"), [
    ("nomodule:EVAL", "cannot import 'nomodule': ModuleNotFoundError: No module named 'nomodule'"),
    ("tests.plugin_evals:missing", "module 'tests.plugin_evals' has no attribute 'missing'"),
    ("tests.plugin_evals:NOT_AN_EVAL", "NOT_AN_EVAL is a dict, not an Eval or a zero-argument callable returning one"),
    ("tests.plugin_evals:CLASHES", "its name 'gsm8k' is taken by evalkit.evals.gsm8k"),
    ("tests.plugin_evals:UNPREFIXED", "metric 'echo.chars' must start with 'echo2.'"),
    ("tests.plugin_evals:AGAIN", "its name 'echo' is an earlier plugin's"),
    ("tests.plugin_evals", "expected module.path:ATTR"),
])
def test_a_bad_plugin_is_one_line_naming_the_field(ref: str, why: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(with_evals({"plugins": [PLUGIN, ref]}), "cfg.yaml")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"cfg.yaml: evals.plugins[1]: {ref!r}: "), message
    assert why in message

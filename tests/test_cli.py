"""The CLI: documented exit codes, help that reads as documentation, plan output, the lock."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from click.testing import CliRunner

from evalkit.cli import main
from evalkit.run.lock import DeviceLock
from tests.conftest import CONFIGS, ROOT
from tests.helpers.cli import evalkit_cli


def test_help_documents_every_exit_code_and_has_examples() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for code, words in (("0", "all cells ran"), ("1", "failing threshold"), ("2", "bad input"),
                        ("3", "cell failed"), ("4", "lock"), ("130", "interrupted")):
        assert any(line.strip().startswith(code) and words in line for line in result.output.splitlines()), code
    documented = (ROOT / "docs" / "commands.md").read_text()
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 5 |", "| 130 |"):
        assert code in documented
    for command in ("matrix", "plan", "report", "compare", "history", "cell"):
        sub = CliRunner().invoke(main, [command, "--help"])
        assert sub.exit_code == 0 and "Example" in sub.output, command


def test_plan_prints_the_twelve_atom_command_lines() -> None:
    result = CliRunner().invoke(main, ["plan", "--model", "deepseek-v4"])
    assert result.exit_code == 0, result.output
    argv_lines = [line for line in result.output.splitlines() if line.strip().startswith("argv:")]
    assert len(argv_lines) == 12
    assert all("python3 -m atom.entrypoints.openai_server --model deepseek-ai/DeepSeek-V4-Pro --host 127.0.0.1 "
               "--server-port '<port>' -tp 8" in line for line in argv_lines)
    assert sum("--enable-dp-attention --cudagraph-mode PIECEWISE" in line for line in argv_lines) == 2
    assert result.output.count("@ ccc861dc5") == 6 and result.output.count("@ 0e9804c21") == 6


def test_exit_4_when_another_run_holds_the_device_lock(tmp_path: Path) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text((CONFIGS / "demo.yaml").read_text() + "devices: {count: 8}\n")
    lock = tmp_path / "devices.lock"
    with DeviceLock(lock, "other-run"):  # flock: a second open of the file conflicts, in this process too
        done = evalkit_cli("matrix", "--config", str(config), "--lock-file", str(lock), "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 4
    assert f"devices are in use by evalkit pid {os.getpid()} (run other-run)" in done.stderr


def test_detect_judges_plain_text_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "loop.txt").write_text("The answer is " + "the same thing again and " * 200)
    (tmp_path / "ok.txt").write_text((ROOT / "README.md").read_text())
    rows = [{"id": "a", "text": "word " * 500, "finish_reason": "length"}, {"id": "b", "text": "A short healthy answer."}]
    (tmp_path / "t.jsonl").write_text("\n".join(__import__("json").dumps(r) for r in rows) + "\n")
    result = CliRunner().invoke(main, ["detect", str(tmp_path / "loop.txt"), str(tmp_path / "ok.txt"), str(tmp_path / "t.jsonl")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1
    # the loop is named first; its unpunctuated words also read as word salad (soup) since issue 36
    assert lines[0].startswith(f"{tmp_path / 'loop.txt'}: collapsed: loop") and "period 5" in lines[0]
    assert lines[1] == f"{tmp_path / 'ok.txt'}: healthy"
    assert lines[2].startswith(f"{tmp_path / 't.jsonl'}:a: collapsed") and lines[3].endswith(":b: too short to judge (5 tokens)")
    (tmp_path / "stutter.txt").write_text(" ".join(f"{w} {w}" for w in (ROOT / "README.md").read_text().split()[:300]))
    (tmp_path / "soup.txt").write_text("The formula C\ufffdH12O6 comes to mind.", encoding="utf-8")
    garbled = CliRunner().invoke(main, ["detect", str(tmp_path / "stutter.txt"), str(tmp_path / "soup.txt")]).output.splitlines()
    assert ": collapsed: stutter (stutter; period 1, onset token" in garbled[0] and "tokens garbled) at: " in garbled[0]
    assert garbled[1].endswith("collapsed: soup (invalid_chars; period 0, onset token 3, 1 tokens garbled) at: 'formula C\ufffdH12O6'")
    as_json = CliRunner().invoke(main, ["detect", "--json", "-"], input="fine text, nothing repeats here.")
    assert as_json.exit_code == 0 and '"collapsed": false' in as_json.output
    bad = CliRunner().invoke(main, ["detect", str(tmp_path / "t.jsonl"), "--field", "body"])
    assert bad.exit_code == 2 and "expected a JSON object with a 'body' field" in bad.output


def test_exit_0_when_no_threshold_breaks_and_notify_runs_an_argv_with_the_markdown_path(
        tmp_path: Path, engine_processes: None) -> None:
    """The healthy pair of the demo breaks no threshold: exit 0, which the notify hook is told too.
    End to end: the cell starts a real simulator process."""
    hook = tmp_path / "hook.py"
    hook.write_text("import os, sys\nopen(sys.argv[1], 'w').write(sys.argv[2] + ' ' + os.environ['EVALKIT_EXIT_CODE'])\n")
    out = tmp_path / "got.txt"
    done = evalkit_cli("matrix", "--model", "demo", "--only", "parallel=tp8,graph=full", "--limit", "10", "--quiet",
                       "--results-dir", str(tmp_path / "r"), "--run-id", "n", "--notify", f"{sys.executable} {hook} {out}",
                       cwd=ROOT)
    assert done.returncode == 0, done.stderr
    path, code = out.read_text().split()
    assert path == str(tmp_path / "r" / "n" / "table.md") and Path(path).is_file() and code == "0"

"""Secrets in the environment never reach a results folder, a plan or a log."""

from __future__ import annotations

from pathlib import Path

from evalkit.redact import REDACTED, redact_argv, redact_env
from tests.conftest import CONFIGS
from tests.helpers.cli import evalkit_cli

SECRET = "hf_s3cr3t_value_that_must_not_leak"
CUSTOM = "custom-private-value-42"


def test_redaction_rules() -> None:
    assert redact_env({"HF_TOKEN": "x", "OPENAI_API_KEY": "y", "PATH": "/bin"}) == {
        "HF_TOKEN": REDACTED, "OPENAI_API_KEY": REDACTED, "PATH": "/bin"}
    assert redact_env({"MY_VAR": "z"}, ["MY_VAR"]) == {"MY_VAR": REDACTED}
    assert redact_argv(["serve", "--api-key", "k", "--hf-token=t", "--port", "1"]) == [
        "serve", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "1"]
    settings = ["--max-num-batched-tokens", "8192", "--max-prefill-tokens=4096", "--sim-tokens-per-second", "50",
                "--tokenizer", "t", "--ssl-keyfile", "k.pem", "--key-value-dtype", "fp8"]
    assert redact_argv(settings) == settings[:-1] + [REDACTED]  # a word of its name is "key": hidden
    assert redact_argv(["--admin-api-key", "a", "--secret=s", "--db_password", "p"]) == [
        "--admin-api-key", REDACTED, f"--secret={REDACTED}", "--db_password", REDACTED]


def test_no_file_of_a_run_and_no_plan_contains_a_secret(tmp_path: Path, engine_processes: None) -> None:
    """End to end: the run's cell starts a real simulator, which inherits the secrets in its environment."""
    text = (CONFIGS / "demo.yaml").read_text()
    text = text.replace("  profile: sim\n", f"  profile: sim\n  env: {{HF_TOKEN: {SECRET}, MY_PRIVATE: {CUSTOM}}}\n")
    text = text.replace("count: 64", "count: 2") + "secret_env: [MY_PRIVATE]\n"
    (tmp_path / "cfg.yaml").write_text(text)
    env = {"EVALKIT_TEST_PASSWORD": SECRET}  # set for each command, as evalkit's own environment
    plan = evalkit_cli("plan", "--config", "cfg.yaml", cwd=tmp_path, env=env)
    assert plan.returncode == 0 and "HF_TOKEN='***'" in plan.stdout
    run = evalkit_cli("matrix", "--config", "cfg.yaml", "--run-id", "r", "--limit", "5",
                      "--only", "parallel=dp8,graph=piecewise", cwd=tmp_path, env=env)
    assert run.returncode in (0, 1), run.stderr
    files = [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and CUSTOM.encode() not in data, path
    for output in (plan.stdout, plan.stderr, run.stdout, run.stderr):
        assert SECRET not in output and CUSTOM not in output

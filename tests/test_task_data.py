"""What the real-answers matrix (docs/real-answers.md) needs of evalkit, checked without an engine:
a GSM8K-format task from the config's own folder, a prompt set from a file, and a plugin tree
proven by its import path alone (the engine's own files rightly lie outside it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.engine.sources import ResolvedSource
from evalkit.errors import ConfigError, EvalError
from evalkit.evals import gsm8k
from evalkit.evals.prompts import load_prompt_set
from evalkit.profiles import get_profile
from evalkit.run.engine_report import check_version
from evalkit.run.progress import PlainProgress
from evalkit.store.records import ImportInfo
from evalkit.verdict.plan import planned_n
from tests.conftest import CONFIGS

ROW = {"question": "Ava has 12 coins and buys 30 more. How many coins does Ava have now?",
       "answer": "12 + 30 = <<12+30=42>>42\n#### 42"}


def task_dir(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in gsm8k.DATA_FILES:
        (tmp_path / name).write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    return tmp_path


def test_the_gsm8k_task_reads_the_config_s_data_dir(tmp_path: Path) -> None:
    settings = gsm8k.GSM8KSettings(data_dir=str(task_dir(tmp_path / "data")), num_fewshot=0)
    gsm8k.GSM8K().check(settings)
    path = gsm8k.write_task_yaml(tmp_path / "tasks", settings)
    files = yaml.safe_load(path.read_text(encoding="utf-8"))["dataset_kwargs"]["data_files"]
    assert files == {"train": str(tmp_path / "data" / "train.jsonl"), "test": str(tmp_path / "data" / "test.jsonl")}
    # Another task's data is another setup: its hash is not the shipped GSM8K's.
    ours = gsm8k.setup_fields(settings, tmp_path / "tasks", {})["data"]
    shipped = gsm8k.setup_fields(gsm8k.GSM8KSettings(num_fewshot=0), tmp_path / "tasks", {})["data"]
    assert ours != shipped


def test_a_data_dir_without_the_task_s_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match="train.jsonl: GSM8K data file is missing"):
        gsm8k.GSM8K().check(gsm8k.GSM8KSettings(data_dir=str(tmp_path)))


def test_a_prompt_set_loads_from_a_jsonl_path_and_is_versioned_by_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": "a-1", "kind": "arithmetic", "prompt": "Question: 1 + 1?\\nAnswer:"}\n', encoding="utf-8")
    found = load_prompt_set(str(path))
    assert [p.id for p in found.prompts] == ["a-1"] and len(found.version) == 64
    with pytest.raises(ConfigError, match="no prompt set"):
        load_prompt_set(str(tmp_path / "missing.jsonl"))


def test_plan_counts_gsm8k_s_limit_not_the_whole_test_set() -> None:
    config = load_config(CONFIGS / "vllm-answers.yaml")
    assert planned_n(config, "gsm8k.flexible", None) == 200
    assert planned_n(config, "gsm8k.flexible", 50) == 50


@pytest.mark.parametrize(("package", "plugin", "status"), [("fastrope", True, "match"), ("vllm", False, "mismatch")])
def test_a_plugin_tree_is_proven_by_its_import_path_alone(tmp_path: Path, package: str, plugin: bool,
                                                          status: str) -> None:
    """vLLM logs its own api_server.py from site-packages: outside a plugin's tree, and rightly so.
    For a tree of vLLM itself the same line is a loud mismatch."""
    config = load_config(CONFIGS / "vllm-answers.yaml")
    cell = expand(config)[0]
    tree = tmp_path / "worktree"
    imports = ImportInfo(package=package, origin=str(tree / package / "__init__.py"), tree=str(tree), inside=True)
    source = ResolvedSource(repo="repo", ref="v0.1", sha="4" * 40, worktree=tree)
    log = "/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: x\n"
    check = check_version("http://127.0.0.1:9", get_profile("vllm"), source, imports, cell.id, PlainProgress(),
                          tree=tree, log_text=log, plugin=plugin).check
    assert check is not None and check.status == status
    if plugin:
        assert [w.kind for w in check.witnesses] == ["import"]

"""evalkit's GSM8K marks are lm-eval's: the `lm_eval` CLI itself, run against the same server
with the same task file and settings, gives identical per-question marks and accuracies."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evalkit.errors import EvalError
from evalkit.evals import gsm8k, lm_eval_adapter
from evalkit.evals.base import EvalContext, Server
from evalkit.evals.gsm8k import GSM8KSettings
from tests.helpers.lm_eval import lm_eval_cli
from tests.helpers.sim import SimServer


@pytest.mark.slow  # all 1319 questions twice through the lm_eval CLI (~2 min): .ci/run runs it
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_marks_identical_to_lm_eval_cli_on_all_questions(tmp_path: Path, endpoint: str,
                                                        sim_process: Callable[..., SimServer]) -> None:
    settings = GSM8KSettings(endpoint=endpoint, num_fewshot=3, num_concurrent=32)
    task_dir = tmp_path / lm_eval_adapter.TASK_DIR
    gsm8k.write_task_yaml(task_dir, settings)
    # One server answers both passes: without run-to-run noise, so any difference is the client's.
    url = sim_process("--enable-dp-attention", "-tp", "8", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off",
                      "--sim-run-noise", "0").url
    ours = gsm8k.run_gsm8k(settings, EvalContext(Server(url, "sim-model"), tmp_path, tmp_path))
    theirs = lm_eval_cli(settings, url, "sim-model", task_dir, tmp_path / "lm_eval_out")
    assert ours.metrics["n"] == 1319
    by_doc: dict[int, dict[str, bool]] = {}
    for s in theirs:
        by_doc.setdefault(s["doc_id"], {})[s["filter"]] = bool(s["exact_match"])
    assert len(by_doc) == 1319
    # The CLI logs a chat prompt (lm-eval's JsonChatStr, a named tuple) as a one-element list.
    prompts = {s["doc_id"]: (lambda p: p[0] if isinstance(p, list) else p)(s["arguments"]["gen_args_0"]["arg_0"])
               for s in theirs}
    for row in ours.samples:
        assert by_doc[row["doc_id"]] == {f: row[f"{f}.correct"] for f in gsm8k.FILTERS}, row["id"]
        assert row["prompt_hash"] == hashlib.sha256(prompts[row["doc_id"]].encode()).hexdigest()[:16], row["id"]
    results = json.loads(next((tmp_path / "lm_eval_out").rglob("results_*.json")).read_text())["results"][gsm8k.TASK_NAME]
    for short, name in (("strict", "strict-match"), ("flexible", "flexible-extract")):
        assert ours.metrics[short] == results[f"exact_match,{name}"]
        assert ours.metrics[f"{short}_stderr"] == results[f"exact_match_stderr,{name}"]
    # The buggy cell of the simulator really scores lower, and every answer came back whole.
    assert 0.84 < ours.metrics["flexible"] < 0.90
    assert ours.metrics["cut_by_max_gen_toks"] == 0 and ours.metrics["empty_responses"] == 0


@pytest.mark.parametrize("template", [
    "Question: {{question}}\nAnswer:", "{{answer}}", "", "{{ answer }}!\n", "{x} {{question}} }}{",
    "{{answer.split('####')[-1].strip()}}", "{{question | upper}}", "{% if question %}Q{% endif %}",
    "{{missing}}", "{{range}}",
])
def test_compiled_templates_render_exactly_as_lm_evals_jinja(template: str) -> None:
    import jinja2
    import lm_eval.utils

    jinja = lm_eval.utils.env.from_string(template)
    for doc in ({"question": " How many?\n", "answer": "It is 4.\n#### 4\n"}, {"question": 7, "answer": None}):
        try:
            expected: str | type[Exception] = jinja.render(**doc)
        except jinja2.UndefinedError:
            expected = jinja2.UndefinedError
        if expected is jinja2.UndefinedError:
            with pytest.raises(jinja2.UndefinedError):
                lm_eval_adapter.compile_template(template)(doc)
        else:
            assert lm_eval_adapter.compile_template(template)(doc) == expected


def test_each_cell_gets_its_own_copy_of_the_cached_task(tmp_path: Path) -> None:
    """Cells share one loaded task; a seed or request built on one copy never leaks into another,
    and every copy builds the prompts a freshly loaded task builds."""
    from lm_eval.tasks import TaskManager

    task_dir = tmp_path / "tasks"
    gsm8k.write_task_yaml(task_dir, GSM8KSettings(num_fewshot=3))

    def prompts(task: object, seed: int) -> list[str]:
        task.set_fewshot_seed(seed)  # type: ignore[attr-defined]
        task.build_all_requests(limit=20, rank=0, world_size=1)  # type: ignore[attr-defined]
        return [inst.arguments[0] for inst in task.instances]  # type: ignore[attr-defined]

    first, second = lm_eval_adapter.task_for_cell(task_dir, gsm8k.TASK_NAME), lm_eval_adapter.task_for_cell(task_dir, gsm8k.TASK_NAME)
    assert first is not second and first.dataset["train"] is second.dataset["train"]
    one, two = prompts(first, 1), prompts(second, 2)
    fresh = TaskManager(include_path=str(task_dir), include_defaults=False).load([gsm8k.TASK_NAME])["tasks"]
    assert one == prompts(fresh[gsm8k.TASK_NAME], 1) and one != two
    assert prompts(lm_eval_adapter.task_for_cell(task_dir, gsm8k.TASK_NAME), 2) == two


def test_lm_eval_s_environment_report_runs_and_imports_nothing() -> None:
    """Every `simple_evaluate` calls lm-eval's `add_env_info`: torch's collect_env (6.4 s per
    process on a GPU box) and an import of transformers. evalkit's evaluations get its fields
    from package metadata instead, the same keys, so lm-eval's results stay whole."""
    import importlib.util
    from importlib.metadata import version

    import lm_eval.evaluator

    lm_eval_adapter._setup_process()
    imported_before = "transformers" in sys.modules
    storage: dict[str, object] = {}
    lm_eval.evaluator.add_env_info(storage)
    transformers = version("transformers") if importlib.util.find_spec("transformers") else "N/A"
    assert storage == {"pretty_env_info": "not collected (evalkit)", "transformers_version": transformers,
                       "lm_eval_version": version("lm_eval"), "upper_git_hash": None}
    assert ("transformers" in sys.modules) == imported_before


def test_samples_record_what_silently_changes_scores(tmp_path: Path, shared_sim: SimServer) -> None:
    settings = GSM8KSettings(num_fewshot=3, max_gen_toks=24)
    gsm8k.write_task_yaml(tmp_path / lm_eval_adapter.TASK_DIR, settings)
    result = gsm8k.run_gsm8k(settings, EvalContext(Server(shared_sim.url, "sim-model"), tmp_path, tmp_path, limit=30))
    row = result.samples[0]
    assert {"prompt_hash", "response", "target", "strict-match.extracted", "flexible-extract.correct",
            "finish_reason", "completion_tokens", "attempts"} <= set(row)
    assert result.metrics["cut_by_max_gen_toks"] > 0  # 24 tokens cannot hold a GSM8K solution
    assert result.metrics["lm_eval_version"] and result.metrics["task_version"] is not None


def test_a_gsm8k_eval_imports_no_torch_where_torch_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               shared_sim: SimServer) -> None:
    """lm-eval seeds torch unless told not to, importing it for an API backend that never uses it:
    6-8 s on the first eval of each process on a GPU box. A `torch` that fails when imported
    stands in for an installed one."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the GSM8K eval imported torch')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert "torch" not in sys.modules
    settings = GSM8KSettings(num_fewshot=3)
    gsm8k.write_task_yaml(tmp_path / lm_eval_adapter.TASK_DIR, settings)
    result = gsm8k.run_gsm8k(settings, EvalContext(Server(shared_sim.url, "sim-model"), tmp_path, tmp_path, limit=5))
    assert result.metrics["n"] == 5 and "torch" not in sys.modules


def test_missing_or_corrupt_data_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "a #### 1"}\n')
    with pytest.raises(EvalError, match=r"test.jsonl: GSM8K data file is missing"):
        gsm8k.check_data(tmp_path)
    (tmp_path / "test.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(EvalError, match=r"test.jsonl:1: not a GSM8K record"):
        gsm8k.check_data(tmp_path)


class _CompletionsOnly(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802  (the stdlib's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        ok = self.path == "/v1/completions"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(json.dumps({"choices": [{"text": "x", "index": 0}]} if ok else {"detail": "Not Found"}).encode())

    def log_message(self, *args: object) -> None:
        pass


def test_an_endpoint_the_server_does_not_serve_is_refused_before_any_question() -> None:
    """A server with only /v1/completions (the `command` profile's simplest case) and a chat config
    (a stdlib HTTP server on a thread of this process)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CompletionsOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with pytest.raises(EvalError, match=r"endpoint is 'chat' but the server answers /v1/chat/completions with HTTP 404"):
            gsm8k.check_endpoint(GSM8KSettings(endpoint="chat"), Server(f"http://127.0.0.1:{port}", "m"))
        gsm8k.check_endpoint(GSM8KSettings(endpoint="completions"), Server(f"http://127.0.0.1:{port}", "m"))
    finally:
        server.shutdown()
        server.server_close()

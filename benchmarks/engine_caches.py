"""An engine's start-up with cold and warm keyed compile caches, and whether its answers change.

Runs one cell (vLLM's CPU build, torch.compile: `graph_mode: NONE`, serving the trained answers
model of docs/real-answers.md by default) through `run_matrix`, evalkit's own launch, so the
keyed cache (engine/caches.py) is the one a nightly gets:

* cold: `--starts` runs, each with its own empty `engine.cache_dir` (a miss every time);
* warm: `--starts` runs on the folder the first cold run filled (a hit every time);
cold and warm in turn, each run's row printed as it ends.

Per run it prints whether cell.json says hit, the key, the seconds from launch to a served
warm-up completion (`engine_ready_s`), what vLLM's log says of its compilation (`init engine
(...) took`, the AOT artifact saved or loaded), and a hash of every answer (GSM8K's responses and
the long generations' texts, greedy, one request at a time so no run's batches differ from
another's); then the median start-up cold and warm, and whether every run's answers are
byte-identical. Hold the box's vLLM lock around it:

    flock /tmp/evalkit-vllm.lock python benchmarks/engine_caches.py --out /tmp/caches [--starts 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from evalkit import MatrixRequest, run_matrix

ROOT = Path(__file__).resolve().parents[1]
LINKS = ROOT / ".evalkit-cache" / "real-engine"
CONFIG = """\
model: {model}
served_name: answers-llama
engine:
  profile: vllm
  python: {python}
  args: ["--max-model-len", "1024", "--dtype", "float32"]
  env: {{HF_HUB_OFFLINE: "1", VLLM_CPU_KVCACHE_SPACE: "1"}}
  cache_dir: {cache_dir}
axes:
  graph:
    compiled: {{settings: {{graph_mode: NONE}}}}
evals:
  gsm8k: {{data_dir: {model}/data, num_fewshot: 0, max_gen_toks: 64, subset: first, num_concurrent: 1}}
  repetition: {{prompt_set: {model}/data/long_prompts.jsonl, count: 8, max_tokens: 512, concurrency: 1}}
  consistency: {{enabled: false}}
  divergence: {{enabled: false}}
timeouts: {{startup: 1800, stop_grace: 20, warmup: 300}}
"""
LOG_LINES = re.compile(r"init engine \(profile, create kv cache, warmup model\) took [0-9.]+ s|"
                       r"Directly load AOT compilation|saved AOT compiled function")


def one_run(out: Path, run_id: str, cache_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run of the cell: its cache record, start-up seconds, compile lines and answers' hash."""
    config = out / f"{run_id}.yaml"
    config.write_text(CONFIG.format(model=args.model.resolve(), python=args.python.absolute(), cache_dir=cache_dir))
    outcome = run_matrix(MatrixRequest(config_path=config, limit=args.questions, results_dir=out / "results",
                                       cache_dir=out / "worktrees", lock=False, history=False, run_id=run_id))
    cell = outcome.run_path / "compiled"
    record = json.loads((cell / "cell.json").read_text())
    if record.get("status") != "ok":
        sys.exit(f"{run_id}: the cell did not finish: {record.get('error')}")
    answers = [json.loads(line).get("response") for line in (cell / "gsm8k.samples.jsonl").read_text().splitlines()]
    answers += [json.loads(line).get("text") for line in (cell / "repetition.samples.jsonl").read_text().splitlines()]
    log = (cell / "engine.log").read_text(errors="replace")
    return {"run": run_id, "cache": record["isolation"]["cache"], "ready_s": record["timings"]["engine_ready_s"],
            "compile": sorted({m.group(0).split(" took")[0] + (" took" if " took" in m.group(0) else "")
                               for m in LOG_LINES.finditer(log)}),
            "init_s": [float(x) for x in re.findall(r"warmup model\) took ([0-9.]+) s", log)],
            "answers": hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16], "n": len(answers),
            "gsm8k": record["metrics"]["gsm8k"].get("flexible")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs (made; must be new)")
    parser.add_argument("--starts", type=int, default=3, help="cold starts and warm starts, each (default 3)")
    parser.add_argument("--questions", type=int, default=32, help="GSM8K questions per run (default 32)")
    parser.add_argument("--model", type=Path, default=LINKS / "answers-model")
    parser.add_argument("--python", type=Path, default=LINKS / "vllm-venv" / "bin" / "python")
    args = parser.parse_args()
    args.out.mkdir(parents=True)
    print("| run | cache | key | start-up s | vLLM init s | vLLM's compile lines | answers (sha256) | GSM8K |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    runs = []
    for i in range(1, args.starts + 1):  # cold and warm in turn: a run cut short still has both
        for run_id, folder in ((f"cold-{i}", f"caches-cold-{i}"), (f"warm-{i}", "caches-cold-1")):
            r = one_run(args.out, run_id, args.out / folder, args)
            runs.append(r)
            print(f"| {r['run']} | {'hit' if r['cache'].get('hit') else 'miss'} | {r['cache'].get('key')} | "
                  f"{r['ready_s']:.1f} | {', '.join(f'{s:.1f}' for s in r['init_s'])} | {'; '.join(r['compile'])} | "
                  f"{r['answers']} ({r['n']}) | {r['gsm8k']} |", flush=True)
    cold = [r["ready_s"] for r in runs if not r["cache"].get("hit")]
    warm = [r["ready_s"] for r in runs if r["cache"].get("hit")]
    same = len({r["answers"] for r in runs}) == 1
    print(f"\nstart-up median: cold {statistics.median(cold):.1f} s ({len(cold)} starts), "
          f"warm {statistics.median(warm):.1f} s ({len(warm)} starts)")
    print(f"answers byte-identical across all {len(runs)} runs: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

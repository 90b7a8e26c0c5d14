"""What a whole `evalkit bisect` costs on the demo bug: engine starts, and each step's questions
and generation tokens next to a full cell.

configs/demo.yaml's evals and thresholds (GSM8K 3-shot on all 1319 questions, 64 long
generations at up to 4096 tokens) on the buggy DP-attention + PIECEWISE cell, whose engine source
is a throwaway repo of tests/helpers/git.py: 64 commits, the fix dropped at commit k (random per
seed). The good end (the root commit) runs once as `evalkit matrix`; each seed's bisect takes it
with `--good-run` and runs its bad end in full and its steps sequentially. Printed per seed: the
commit found, engine starts, steps; then the median step against the full cell.

    python benchmarks/bisect_cost.py [--seeds 3] [--commits 64]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TQDM_DISABLE", "1")  # lm-eval's bars, as the CLI does

from evalkit.api.matrix import MatrixRequest, run_matrix  # noqa: E402
from evalkit.bisect.driver import BisectRequest, run_bisect  # noqa: E402
from evalkit.bisect.step import sample_tokens  # noqa: E402
from evalkit.store import read_jsonl  # noqa: E402
from tests.helpers.git import add_branch, make_repo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def demo_config(repo: Path, ref: str, path: Path) -> Path:
    """configs/demo.yaml's evals, thresholds and timeouts on one cell whose source is `repo`@`ref`."""
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    path.write_text(yaml.safe_dump({
        "model": "sim/bisect-bench", "served_name": "bisect-bench",
        "engine": {"profile": "sim", "package": "simfix", "args": ["--sim-fix-module", "simfix", "--sim-startup-seconds", "0.5", "--sim-seed", "0"],
                   "settings": {"tensor_parallel": 8, "dp_attention": True, "graph_mode": "PIECEWISE"}},
        "axes": {"src": {"head": {"source": {"repo": str(repo), "ref": ref}}}},
        "evals": demo["evals"], "thresholds": demo["thresholds"], "timeouts": demo["timeouts"],
    }, sort_keys=False))
    return path


def usage(folder: Path) -> tuple[int, int, int]:
    """(questions, generations, generation tokens) stored in a cell folder."""
    gsm8k = list(read_jsonl(folder / "gsm8k.samples.jsonl"))
    long = list(read_jsonl(folder / "repetition.samples.jsonl"))
    return len(gsm8k), len(long), sum(sample_tokens(row) for row in gsm8k + long)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo, good = make_repo(root)
        results = root / "results"
        started = time.monotonic()
        run_matrix(MatrixRequest(config_path=demo_config(repo, good, root / "good.yaml"), run_id="good",
                                 results_dir=results, cache_dir=root / "cache", history=False))
        good_s = time.monotonic() - started
        full = usage(results / "good" / "head")
        print(f"good end (full cell, once): {full[0]} questions, {full[1]} generations, {full[2]} tokens, {good_s:.1f} s")
        steps: list[tuple[int, int, int, float]] = []
        for seed in range(args.seeds):
            k = random.Random(seed).randrange(1, args.commits)
            clone = root / f"seed{seed}"
            subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
            shas = add_branch(clone, "bug", args.commits, first_bad=k)
            started = time.monotonic()
            outcome = run_bisect(BisectRequest(
                config_path=demo_config(clone, "bug", root / f"seed{seed}.yaml"), cell="head", good=good, bad="bug",
                good_run="good", results_dir=results, cache_dir=root / f"cache{seed}", bisect_id=f"seed{seed}"))
            wall = time.monotonic() - started
            record = outcome.record
            assert record.first_bad == shas[k], (seed, k, record.message)
            bad = usage(outcome.folder / record.bad.cell_dir) if record.bad else (0, 0, 0)
            print(f"seed {seed}: k={k}, found {record.first_bad[:12]} (exact) in {wall:.0f} s; {record.engine_starts} "
                  f"engine starts: the bad end ({bad[0]} questions, {bad[2]} tokens) + {len(record.steps)} steps "
                  f"(at most ceil(log2 {args.commits}) + 1 = {math.ceil(math.log2(args.commits)) + 1} allowed)")
            for s in record.steps:
                steps.append((s.questions, s.generations, s.generation_tokens, s.wall_s))
                print(f"    {s.sha[:12]} {s.verdict:<4} {s.questions:>4} questions {s.generations:>3} generations "
                      f"{s.generation_tokens:>7} tokens {s.wall_s:5.1f} s")
        q, g, tokens, wall = (statistics.median(s[i] for s in steps) for i in range(4))
        total_q, total_t = sum(s[0] for s in steps), sum(s[2] for s in steps)
        print(f"median step of {len(steps)}: {q:g} of {full[0]} questions ({q / full[0]:.1%}), {g:g} of {full[1]} "
              f"generations, {tokens:g} of {full[2]} tokens ({tokens / full[2]:.1%}), {wall:.1f} s")
        print(f"all steps of all seeds: {total_q} questions and {total_t} tokens, "
              f"{total_q / (len(steps) * full[0]):.1%} / {total_t / (len(steps) * full[2]):.1%} of full cells in their place")


if __name__ == "__main__":
    main()

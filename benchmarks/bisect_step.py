"""What a bisect step costs on the demo bug, next to a full cell: questions, generations, tokens.

The demo's evals and thresholds (configs/demo.yaml: GSM8K 3-shot, 64 long generations at 4096
tokens) on the buggy DP-attention + PIECEWISE cell, its engine source the throwaway repo of
tests/helpers/git.py (the fix dropped at commit 4 of 8). The ends run as full cells; then a step
on a buggy commit and one on a healthy commit run for each seed (the seed orders the questions),
and each prints what it used against the full cell's 1319 questions and 64 generations.

    python benchmarks/bisect_step.py [--seeds 5] [--alpha 0.01]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.bisect.ends import judge_ends  # noqa: E402
from evalkit.bisect.step import run_step, sample_tokens  # noqa: E402
from evalkit.config import Source, load_config  # noqa: E402
from evalkit.config.cells import expand  # noqa: E402
from evalkit.engine.sources import checkout  # noqa: E402
from evalkit.evals import registry  # noqa: E402
from evalkit.evals.cancel import Stop
from evalkit.run.cell import CellControl, CellJob, run_cell  # noqa: E402
from evalkit.run.options import Silent  # noqa: E402
from evalkit.store import RunStore, read_jsonl  # noqa: E402
from tests.helpers.git import add_branch, make_repo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIRST_BAD = 4


def demo_config(repo: Path, folder: Path) -> Path:
    """configs/demo.yaml's evals and thresholds on one cell whose engine source is `repo`."""
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    config = {
        "model": "sim/bisect-bench", "served_name": "bisect-bench",
        "engine": {"profile": "sim", "package": "simfix", "args": ["--sim-fix-module", "simfix", "--sim-startup-seconds", "0.5",
                                              "--sim-seed", "0"],
                   "settings": {"tensor_parallel": 8, "dp_attention": True, "graph_mode": "PIECEWISE"}},
        "axes": {"src": {"head": {"source": {"repo": str(repo), "ref": "main"}}}},
        "evals": demo["evals"], "thresholds": demo["thresholds"], "timeouts": demo["timeouts"],
    }
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def usage(folder: Path) -> tuple[int, int, int]:
    """(questions, generations, tokens) stored in a cell folder."""
    gsm8k = list(read_jsonl(folder / "gsm8k.samples.jsonl"))
    generations = list(read_jsonl(folder / "repetition.samples.jsonl"))
    return len(gsm8k), len(generations), sum(sample_tokens(row) for row in gsm8k + generations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.01)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo, _ = make_repo(root)
        shas = add_branch(repo, "line", 8, first_bad=FIRST_BAD)
        config = load_config(demo_config(repo, root))
        store = RunStore(root / "results", "bisect-bench")
        store.create()
        for ev, settings in registry.enabled(config.evals):
            ev.prepare(store.path, settings)

        def job(name: str, sha: str) -> CellJob:
            cell = dataclasses.replace(expand(config)[0], id=name)
            return CellJob(config, cell, store, Silent(), source=checkout(Source(repo=str(repo), ref=sha), root / "cache"))

        for name, sha in (("good", shas[0]), ("bad", shas[-1])):
            record = run_cell(job(name, sha), CellControl(Stop()))
            assert record.status == "ok", record.message
        ends = judge_ends(config, store.cell_dir("good"), store.cell_dir("bad"), args.alpha)
        print(f"ends: {ends.reason}")
        full = {name: usage(store.cell_dir(name)) for name in ("good", "bad")}
        for name, (q, g, tokens) in full.items():
            print(f"full cell ({name} end): {q} questions, {g} generations, {tokens} tokens")
        rows: dict[str, list[tuple[int, int, int, float]]] = {"bad": [], "good": []}
        for seed in range(args.seeds):
            for kind, sha in (("bad", shas[FIRST_BAD + 1]), ("good", shas[FIRST_BAD - 1])):
                outcome = run_step(job(f"step-{kind}-{seed}", sha), CellControl(Stop()),
                                   store.cell_dir("good"), ends, seed=seed)
                assert outcome.verdict == kind, outcome.reason
                rows[kind].append((outcome.questions, outcome.generations, outcome.generation_tokens, outcome.wall_s))
                print(f"seed {seed} {kind} step: {outcome.questions} questions, {outcome.generations} generations, "
                      f"{outcome.generation_tokens} tokens, {outcome.wall_s:.1f} s")
        for kind, found in rows.items():
            q, g, tokens = (statistics.median(r[i] for r in found) for i in range(3))
            fq, fg, ft = full[kind]
            print(f"{kind} step, median of {len(found)}: {q:g} of {fq} questions ({q / fq:.1%}), {g:g} of {fg} "
                  f"generations ({g / fg:.1%}), {tokens:g} of {ft} tokens ({tokens / ft:.1%}) of the {kind} end's full cell")


if __name__ == "__main__":
    main()

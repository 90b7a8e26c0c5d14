"""What the 12-cell DeepSeek-V4 nightly costs: the demo matrix on the simulator, paced at
DeepSeek-V4's timings scaled down in time by a stated factor, projected back to a real night.

The pacing (issue 49; REFERENCE.md "Cost on an 8-GPU box"): engine start-up 8 min (vllm#43189),
decode 60 ms a token per request (the middle of 40-80 ms), the evals of configs/deepseek-v4.yaml
(GSM8K 3-shot, 65 requests at a time; all 72 long generations of up to 16,384 tokens, 16 at a
time; no divergence or consistency eval), each cell holding 8 devices (TP8: one cell at a time on
one 8-GPU box). Every simulated second stands for `--scale` real ones. The long generations are
cut to 1/`--token-cut` of their tokens, each token paced that many times slower
(`--sim-long-tokens-per-second`), so a generation takes the time of a full one while the box
streams and checks a fraction of the text (the collapse signature starts within 600 tokens).

Two passes of the same matrix: unpaced, then paced. What the pacing made is x scale; evalkit's
and the simulator's own seconds, which a real night spends once, count once: the teardown, the
gaps between evals and the rest of the cell (its tree's proof, records) as measured; the
start-up as measured less the simulated load it holds (480 s / scale), plus the real 480 s; GSM8K
(lm-eval builds every request before sending and scores after) less the same cell's unpaced
seconds: scale x (paced - unpaced) + unpaced. The long generations stream while the pacing
sleeps, so they are x scale as measured. Evals that ran at once (a wave) are projected at their
offsets x scale, the cell waiting on the slowest. GSM8K's engine time (~2 min a cell) is below
lm-eval's own at this scale, so its projection carries that noise (minutes a cell on a loaded
box); start-up and the long generations are most of a night. The simulator's decode time does
not grow with the batch (60 ms a token is a nightly's, at its concurrency): a wave that adds
requests in flight is projected no slower per token.

It prints the projected night (wall on one 8-GPU box, GPU-hours per verdict, by phase), beside
what the pacing alone says from the run's own generation lengths (what a box that keeps up with the
paced streams would show; a loaded box falls behind), and writes
the projected cells into a history (`--db`) under the config name deepseek-v4, each run's command
marked projected, so `evalkit plan --model deepseek-v4 --db DB` gives the same projection.

    python benchmarks/nightly_cost.py --label before --evals apart            # today's sequential evals
    python benchmarks/nightly_cost.py --label after --evals wave --floors OUT/results/before-unpaced
    [--scale 100] [--token-cut 16] [--long-concurrency 72] [--out DIR] [--db DB]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalkit.store.costs import HOUR, Span, cell_cost  # noqa: E402 - this checkout's evalkit

STARTUP_S = 480.0
"""DeepSeek-V4's engine start-up on vLLM, 8 GPUs (vllm#43189: ~8 min)."""
TOKEN_S = 0.060
"""Decode seconds per token per request at a nightly's concurrency (40-80 ms; REFERENCE.md)."""
FLOORED = ("gsm8k",)
"""Evals whose own CPU work comes before or after the engine's paced work: counted once."""
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def write_config(path: Path, scale: float | None, cut: int, evals: str, long_concurrency: int | None) -> Path:
    """The demo's matrix with deepseek-v4.yaml's evals (long generations cut to 1/cut of their
    tokens), paced at 1/scale of DeepSeek-V4's timings (None: unpaced); named deepseek-v4.yaml so
    the history files its runs under that config."""
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    real = yaml.safe_load((ROOT / "configs" / "deepseek-v4.yaml").read_text())
    args = list(demo["engine"]["args"])
    args[args.index("--sim-startup-seconds") + 1] = f"{STARTUP_S / scale:g}" if scale else "0"
    if scale:
        args += ["--sim-tokens-per-second", f"{scale / TOKEN_S:g}",
                 "--sim-long-tokens-per-second", f"{scale / (TOKEN_S * cut):g}", "--sim-stream-interval", "16"]
    demo["engine"]["args"] = args
    settings = real["evals"]
    settings["repetition"] = {**settings["repetition"], "max_tokens": settings["repetition"]["max_tokens"] // cut}
    if long_concurrency:
        settings["repetition"]["concurrency"] = long_concurrency
    demo["evals"] = {**settings, "divergence": {"enabled": False}, "consistency": {"enabled": False}}
    demo["run"] = {"evals": evals}
    demo["thresholds"] = [t for t in demo["thresholds"] if t["metric"].split(".")[0] in ("gsm8k", "repetition")]
    demo["description"] = (f"the demo matrix paced at DeepSeek-V4's timings / {scale:g}" if scale else
                           "the demo matrix unpaced") + " (benchmarks/nightly_cost.py)"
    # YAML 1.1 read `ab`'s keys on/off as booleans: named again; written as JSON, which YAML reads as written
    demo["ab"] = {{True: "on", False: "off"}.get(k, k): v for k, v in demo["ab"].items()}
    path.mkdir(parents=True, exist_ok=True)
    (path / "deepseek-v4.yaml").write_text(json.dumps(demo, indent=1))
    return path / "deepseek-v4.yaml"


def run_matrix(config: Path, results: Path, run_id: str, only: list[str]) -> Path:
    shutil.rmtree(results / run_id, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "evalkit.cli", "matrix", "--config", str(config), "--run-id", run_id,
                           "--results-dir", str(results), "--no-history", "-q", *(a for sel in only for a in ("--only", sel))], cwd=config.parent, check=False,
                          stdout=subprocess.DEVNULL, env=ENV)
    if done.returncode not in (0, 1) or not (results / run_id / "summary.json").is_file():
        sys.exit(f"evalkit matrix exited {done.returncode}")
    return results / run_id


def wall_of(run: Path) -> float:
    """The run's wall seconds, from run.json's start and end."""
    info = json.loads((run / "run.json").read_text())
    return (datetime.fromisoformat(info["finished_at"]) - datetime.fromisoformat(info["started_at"])).total_seconds()


def cells_of(run: Path) -> dict[str, dict[str, Any]]:
    info = json.loads((run / "run.json").read_text())
    return {c: json.loads((run / c / "cell.json").read_text()) for c in info["cells"] if (run / c / "cell.json").is_file()}


def _spans(cell: dict[str, Any]) -> list[Span]:
    return [Span.model_validate(s) for s in cell["cost"]["spans"]]


def project(paced: dict[str, Any], unpaced: dict[str, Any], scale: float) -> dict[str, Any]:
    """The paced cell as a real night would run it: its timings and cost, every second x scale but
    the floors of `FLOORED` (the unpaced cell's seconds of the same phase), counted once."""
    spans, floors = _spans(paced), {s.name: s.wall_s for s in _spans(unpaced) if s.name in FLOORED}

    def stretch(s: Span) -> float:
        if s.kind == "startup":  # the simulated load is known: STARTUP_S / scale of it; the rest counts once
            return s.wall_s + (scale - 1) * STARTUP_S / scale
        floor = floors.get(s.name, 0.0)
        return max(floor, scale * s.wall_s - (scale - 1) * floor)

    startup = next(s for s in spans if s.kind == "startup")
    body = next((s for s in spans if s.kind == "evals"), startup)
    evals = sorted((s for s in spans if s.kind == "eval"), key=lambda s: s.start_s)
    wave = any(b.start_s < a.end_s for a, b in zip(evals, evals[1:]))
    start = stretch(startup)
    out = [Span(name="startup", kind="startup", start_s=0.0, end_s=start)]
    was, now = body.start_s, start  # the last eval's end, measured and projected
    for s in evals:  # one after another: each after the last and the gap; a wave: at its offset x scale
        began = start + scale * (s.start_s - body.start_s) if wave else now + (s.start_s - was)
        out.append(Span(name=s.name, kind="eval", start_s=began, end_s=began + stretch(s)))
        was, now = max(was, s.end_s), max(now, out[-1].end_s)
    end = now + max(0.0, body.end_s - was)
    if body is not startup:
        out.insert(1, Span(name="evals", kind="evals", start_s=start, end_s=end))
    teardown = next((s for s in spans if s.kind == "teardown"), None)
    if teardown is not None:
        out.append(Span(name="teardown", kind="teardown", start_s=end, end_s=end + teardown.wall_s))
    measured = sum(s.wall_s for s in spans if s.kind != "eval")
    wall = max(s.end_s for s in out) + max(0.0, paced["cost"]["wall_s"] - measured)
    cost = cell_cost(paced["cost"]["devices"], paced["cost"]["devices_from"], round(wall, 3), out)
    timings = {"engine_ready_s": start, **{f"{s.name}_s": s.wall_s for s in out if s.kind == "eval"}, "total_s": wall}
    return {**paced, "timings": timings, "cost": cost.model_dump()}


def _pool(tokens: list[int], slots: int) -> float:
    """Seconds `tokens` generations take at TOKEN_S a token, `slots` at a time, each started as one ends."""
    free = [0.0] * slots
    for n in tokens:
        heapq.heappush(free, heapq.heappop(free) + n * TOKEN_S)
    return max(free)


def paced_alone(run: Path, cell_id: str, cut: int, wave: bool) -> float:
    """A cell's seconds by the pacing alone, from the lengths the run generated: start-up, GSM8K's
    answers 65 at a time and the long generations (their full tokens) at the run's concurrency,
    one after the other or, in a wave, the slower of the two: what a box that keeps up would show."""
    config = json.loads((run / "run.json").read_text())["config"]["evals"]
    rows = [json.loads(line) for line in (run / cell_id / "gsm8k.samples.jsonl").open()]
    gsm8k = _pool([r["completion_tokens"] for r in rows], config["gsm8k"]["num_concurrent"])
    rows = [json.loads(line) for line in (run / cell_id / "repetition.samples.jsonl").open()]
    long = _pool([r["metrics"]["n_tokens"] * cut for r in rows], config["repetition"]["concurrency"])
    return STARTUP_S + (max(gsm8k, long) if wave else gsm8k + long)


def _h(seconds: float) -> str:
    return f"{seconds / HOUR:.2f} h" if seconds >= HOUR else f"{seconds / 60:.1f} min"


def report(projected: dict[str, dict[str, Any]], run: Path, scale: float, wall: float, cut: int, wave: bool,
           load: str) -> None:
    costs = [c["cost"] for c in projected.values()]
    device_s = sum(c["device_s"] for c in costs)
    night = sum(c["wall_s"] for c in costs)  # TP8 cells on one 8-GPU box: one at a time
    phases: dict[str, float] = {}
    for c in costs:
        for name, value in c["phases"].items():
            phases[name] = phases.get(name, 0.0) + value
    summary = json.loads((run / "summary.json").read_text())
    broken = sorted({c["id"] for c in summary["cells"] if any(f.get("action") == "fail" for f in c.get("flags", []))})
    print(f"paced run: {wall:.0f} s wall for {len(costs)} cells at 1/{scale:g} of real time, long generations cut "
          f"to 1/{cut} of their tokens{load}; exit {summary['exit_code']}, "
          f"broken: {', '.join(broken) or 'none'}")
    print(f"projected real nightly: {_h(night)} wall on one 8-GPU box, {device_s / HOUR:.1f} GPU-hours per verdict "
          f"(x{scale:g} would say {_h(wall * scale)})")
    alone = sum(paced_alone(run, cell_id, cut, wave) for cell_id in projected)
    print(f"the pacing alone (the run's own generation lengths, 60 ms a token): {_h(alone)}, "
          f"{8 * alone / HOUR:.1f} GPU-hours; the rest is this box not keeping up with it")
    print("\n| phase | GPU-hours | share |\n|---|---|---|")
    for name, value in sorted(phases.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {value / HOUR:.2f} | {value / device_s:.0%} |")
    print("\n| cell | wall | GPU-hours | waited on |\n|---|---|---|---|")
    for cell_id, c in projected.items():
        print(f"| {cell_id} | {_h(c['cost']['wall_s'])} | {c['cost']['device_s'] / HOUR:.2f} | "
              f"{c['cost'].get('waited_on') or '-'} |")


def write_history(run: Path, projected: dict[str, dict[str, Any]], out: Path, db: Path, label: str,
                  scale: float) -> None:
    """The projected cells as a run folder, imported into `db` (config name deepseek-v4)."""
    folder = out / "projected" / f"projected-{label}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(run, folder)
    info = json.loads((folder / "run.json").read_text())
    info["run_id"] = folder.name
    info["command"] = [*info.get("command", []), f"# projected x{scale:g} by benchmarks/nightly_cost.py"]
    (folder / "run.json").write_text(json.dumps(info))
    for cell_id, cell in projected.items():
        (folder / cell_id / "cell.json").write_text(json.dumps(cell))
    subprocess.run([sys.executable, "-m", "evalkit.cli", "history", "--db", str(db), "--import", str(folder)],
                   cwd=out, check=True, stdout=subprocess.DEVNULL, env=ENV)
    print(f"\nprojected history: evalkit plan --model deepseek-v4 --db {db}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=100.0, help="real seconds per simulated second")
    parser.add_argument("--token-cut", type=int, default=16, help="long generations keep 1/N of their tokens")
    parser.add_argument("--label", default="before", help="the run's name (before, after)")
    parser.add_argument("--evals", choices=("apart", "wave"), default="apart",
                        help="run.evals: a cell's evals one after another (before issue 49) or at once")
    parser.add_argument("--long-concurrency", type=int,
                        help="the long generations in flight at once (default deepseek-v4.yaml's 16)")
    parser.add_argument("--floors", type=Path, help="an unpaced pass of the same matrix to reuse (its run folder)")
    parser.add_argument("--paced", type=Path, help="a paced pass to project again (its run folder): nothing runs")
    parser.add_argument("--out", type=Path, default=Path("/tmp/evalkit-nightly-cost"))
    parser.add_argument("--db", type=Path, help="the projected history (default OUT/projected-LABEL.db)")
    parser.add_argument("--only", action="append", default=[], help="cells (evalkit matrix --only), for a probe")
    args = parser.parse_args()
    out: Path = args.out
    results = out / "results"
    unpaced = args.floors or run_matrix(write_config(out / "unpaced", None, args.token_cut, "apart", None), results,
                                        f"{args.label}-unpaced", args.only)
    run = args.paced or run_matrix(write_config(out / f"paced-{args.label}", args.scale, args.token_cut, args.evals,
                                                args.long_concurrency), results, args.label, args.only)
    wall = wall_of(run)
    floors = cells_of(unpaced)
    projected = {cell_id: project(cell, floors[cell_id], args.scale) for cell_id, cell in cells_of(run).items()
                 if cell.get("cost") and cell_id in floors}
    config = json.loads((run / "run.json").read_text())["config"]
    print(f"run.evals {config['run']['evals']}, long generations {config['evals']['repetition']['concurrency']} at a time")
    load = "" if args.paced else f" (load average {os.getloadavg()[0]:.1f} as it ended)"
    report(projected, run, args.scale, wall, args.token_cut, config["run"]["evals"] == "wave", load)
    write_history(run, projected, out, args.db or out / f"projected-{args.label}.db", args.label, args.scale)


if __name__ == "__main__":
    main()

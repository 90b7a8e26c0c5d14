"""The model's own collapse signal measured: recall and false positives, text rules alone vs combined.

A healthy engine's long generations are the negatives. The positives are planted from them: each
healthy text keeps its first quarter (at least 8 tokens) and goes on with degenerate material of
max(--plant-tokens, the rest's length) tokens, cut at max_tokens, as a collapse that runs to its
limit:

* ``shuffled``: the engine's own healthy outputs' tokens (all prompts pooled) in random order;
* ``code``: tokens of real source (Python's ``json`` package, a C header) in random order;
* ``multilingual``: words of real message catalogues (glib's, in Russian, Japanese, Chinese,
  Arabic, German, Greek and Hindi, from /usr/share/locale) in random order;
* ``soup``, ``latin-soup``: the simulator's buggy cell's own soup words (evalkit.sim.garble).

Every text, healthy or planted, is scored by the engine teacher-forced after its prompt
(evals/model_signal.py's one request) and judged by the text rules (the collapse detector). A cell
is simulated as the eval would see it: the prompts split in four, one quarter planted and the
rest healthy, judged by `model_signal.judge` (so the reference is the cell's own text-healthy
samples, planted ones the text rules miss included), rotated so every prompt is planted once;
and a cell where every sample is planted (only the ceiling can act there).

    python benchmarks/model_signal.py sim --seeds 1 2 --tune     # choose margin and ceiling
    python benchmarks/model_signal.py sim --seeds 3 4 5          # report on other seeds
    python benchmarks/model_signal.py demo                       # the demo's 12 cells, text vs combined
    python benchmarks/model_signal.py cost --count 64 --max-tokens 4096   # what the request costs
    python benchmarks/model_signal.py served --base-url http://127.0.0.1:8000 --served-name NAME \\
        --prompt-set PATH.jsonl --max-tokens 512                 # a real engine (vLLM), report only
"""

from __future__ import annotations

import argparse
import asyncio
import gettext
import inspect
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.evals import model_signal  # noqa: E402
from evalkit.evals.base import Server  # noqa: E402
from evalkit.evals.detector import analyze_text  # noqa: E402
from evalkit.evals.http_client import pooled_client  # noqa: E402
from evalkit.evals.model_signal import ModelSignalSettings  # noqa: E402
from evalkit.evals.prompts import Prompt, load_prompt_set  # noqa: E402
from evalkit.evals.repetition import RepetitionSettings, run_repetition  # noqa: E402
from evalkit.sim import garble  # noqa: E402
from evalkit.sim.tokens import tokenize  # noqa: E402

KINDS = ("shuffled", "code", "multilingual", "soup", "latin-soup")
LANGUAGES = ("ru", "ja", "zh_CN", "ar", "de", "el", "hi")


def code_tokens() -> list[str]:
    """Tokens of real source code: Python's json package and, where installed, a C header."""
    import json.decoder
    import json.encoder

    text = inspect.getsource(json.decoder) + inspect.getsource(json.encoder)
    header = Path("/usr/include/stdio.h")
    return tokenize(text + (header.read_text(errors="replace") if header.is_file() else ""))


def catalogue_tokens() -> list[str]:
    """Words of glib's translated messages in several languages and scripts."""
    words: list[str] = []
    for lang in LANGUAGES:
        path = Path(f"/usr/share/locale/{lang}/LC_MESSAGES/glib20.mo")
        if path.is_file():
            with path.open("rb") as file:
                catalogue = gettext.GNUTranslations(file)._catalog  # type: ignore[attr-defined]
            words += [t for value in catalogue.values() if isinstance(value, str) for t in tokenize(" " + value)]
    return words


def material(kind: str, pool: list[str], count: int, rng: random.Random, key: str) -> list[str]:
    """``count`` tokens of degenerate material of ``kind`` (module docstring)."""
    if kind in ("soup", "latin-soup"):
        return garble.soup(count, kind == "latin-soup", "benchmark", key)
    return [pool[rng.randrange(len(pool))] for _ in range(count)]


def planted(text: str, kind: str, pools: dict[str, list[str]], max_tokens: int, least: int, rng: random.Random,
            key: str) -> str:
    """The healthy text's first quarter, then degenerate material, cut at ``max_tokens`` tokens."""
    tokens = tokenize(text)
    keep = max(8, len(tokens) // 4)
    more = material(kind, pools.get(kind, []), max(least, len(tokens) - keep), rng, key)
    return "".join((tokens[:keep] + more)[:max(max_tokens, keep + 1)])


async def score_all(server: Server, items: list[tuple[Prompt, str]], rule: ModelSignalSettings) -> list[dict[str, Any]]:
    async with pooled_client(server, 8, 600.0) as client:
        semaphore = asyncio.Semaphore(8)

        async def one(item: tuple[Prompt, str]) -> dict[str, Any]:
            async with semaphore:
                return await model_signal.score(client, server, item[0], item[1], rule, "completions")

        return list(await asyncio.gather(*(one(item) for item in items)))


def sample(text: str, figures: dict[str, Any]) -> dict[str, Any]:
    """A samples row as the repetition eval leaves it before judging."""
    return {"collapsed": analyze_text(text, finish_reason="length").collapsed, "model_signal": figures}


def measure(server: Server, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Healthy generations and planted texts of one engine, every one scored and text-judged."""
    rule = ModelSignalSettings()
    prompt_set, max_tokens = args.prompt_set, args.max_tokens
    settings = RepetitionSettings(prompt_set=prompt_set, count=args.count, max_tokens=max_tokens, concurrency=8)
    healthy = [row for row in run_repetition(settings, server).samples if not row["text_collapsed"]]
    prompts = {p.id: p for p in load_prompt_set(prompt_set).prompts}
    rng = random.Random(seed)
    pools = {"shuffled": [t for row in healthy for t in tokenize(row["text"])], "code": code_tokens(),
             "multilingual": catalogue_tokens()}
    out: dict[str, Any] = {"healthy": [sample(row["text"], row["model_signal"]) for row in healthy]}
    for kind in KINDS:
        texts = [planted(row["text"], kind, pools, max_tokens, args.plant_tokens, rng, f"{seed}/{row['id']}")
                 for row in healthy]
        scored = asyncio.run(score_all(server, [(prompts[row["id"]], t) for row, t in zip(healthy, texts)], rule))
        out[kind] = [sample(text, figures) for text, figures in zip(texts, scored)]
    return out


def judged(rows: list[dict[str, Any]], rule: ModelSignalSettings) -> list[dict[str, Any]]:
    rows = [dict(row) for row in rows]
    model_signal.judge(rows, rule)
    return rows


def tally(data: dict[str, Any], rule: ModelSignalSettings) -> dict[str, dict[str, int]]:
    """Per kind: planted texts caught by the text rules / by either signal, of how many, in mixed
    cells (one quarter planted, rotated) and in all-planted cells; false positives: healthy texts
    flagged in any of the three mixed cells they are healthy in, text alone and combined."""
    healthy = data["healthy"]
    out: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        t = {"n": 0, "text": 0, "both": 0, "neg": len(healthy), "all_n": len(data[kind]), "all_text": 0, "all_both": 0}
        fp_text, fp_both = set(), set()  # healthy texts flagged in any of the cells they are healthy in
        for offset in range(4):
            cell = [data[kind][i] if i % 4 == offset else row for i, row in enumerate(healthy)]
            for i, row in enumerate(judged(cell, rule)):
                if i % 4 == offset:
                    t["n"] += 1
                    t["text"] += row["text_collapsed"]
                    t["both"] += row["collapsed"]
                else:
                    fp_text |= {i} if row["text_collapsed"] else set()
                    fp_both |= {i} if row["collapsed"] else set()
        t |= {"fp_text": len(fp_text), "fp_both": len(fp_both)}
        for row in judged(data[kind], rule):
            t["all_text"] += row["text_collapsed"]
            t["all_both"] += row["collapsed"]
        out[kind] = t
    return out


def separation(data: dict[str, Any]) -> dict[str, float]:
    """What the rule's two numbers are chosen from: the worst-window NLL's excess over the healthy
    median, highest among healthy samples and lowest among planted ones, and the same for the
    absolute value."""
    worst = [row["model_signal"]["worst_nll"] for row in data["healthy"]]
    median = statistics.median(worst)
    planted = [row["model_signal"]["worst_nll"] for kind in KINDS for row in data[kind]]
    return {"healthy_median": median, "healthy_max": max(worst), "planted_min": min(planted),
            "healthy_excess_max": max(worst) - median, "planted_excess_min": min(planted) - median}


def table(name: str, tallies: dict[str, dict[str, int]]) -> list[str]:
    """Per kind, each figure as text rules alone, then combined with the model signal."""
    lines = [f"| {name} | recall: text, combined | all planted: text, combined | healthy flagged: text, combined |",
             "|---|---|---|---|"]
    for kind, t in tallies.items():
        lines.append(f"| {kind} | {t['text']}/{t['n']}, {t['both']}/{t['n']} | {t['all_text']}/{t['all_n']}, "
                     f"{t['all_both']}/{t['all_n']} | {t['fp_text']}/{t['neg']}, {t['fp_both']}/{t['neg']} |")
    return lines


def summed(all_tallies: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    return {kind: {key: sum(t[kind][key] for t in all_tallies) for key in all_tallies[0][kind]} for kind in KINDS}


def run(make: Callable[[int], Server], seeds: list[int], args: argparse.Namespace, label: str) -> None:
    rule = ModelSignalSettings()
    tallies, seps = [], []
    for seed in seeds:
        started = time.perf_counter()
        data = measure(make(seed), args, seed)
        tallies.append(tally(data, rule))
        seps.append(separation(data))
        print(f"{label} {seed}: {len(data['healthy'])} healthy texts, {time.perf_counter() - started:.0f} s; "
              + ", ".join(f"{k} {v:.2f}" for k, v in seps[-1].items()), file=sys.stderr)
    if args.tune:
        high = max(s["healthy_excess_max"] for s in seps)
        low = min(s["planted_excess_min"] for s in seps)
        print(f"healthy excess max {high:.2f}, planted excess min {low:.2f} nats/token: margin midway {(high + low) / 2:.2f}")
        high = max(s["healthy_max"] for s in seps)
        low = min(s["planted_min"] for s in seps)
        print(f"healthy worst-window max {high:.2f}, planted min {low:.2f} nats/token: ceiling midway {(high + low) / 2:.2f}")
    print(f"rule: {model_signal.RULE}; window {rule.window}, margin {rule.margin}, ceiling {rule.ceiling}; "
          f"{label}s {' '.join(map(str, seeds))}")
    print("\n".join(table("planted", summed(tallies))))


def demo(args: argparse.Namespace) -> None:
    """Every cell of configs/demo.yaml, in this process with the argv evalkit builds for it: the
    long generations collapsed by the text rules and by either signal (only the buggy cell should)."""
    from evalkit.config.cells import expand
    from evalkit.config.loader import load_config
    from evalkit.engine.launch import build_launch
    from tests.helpers.sim import asgi_server

    config = load_config(Path(__file__).resolve().parent.parent / "configs" / "demo.yaml")
    settings = RepetitionSettings(count=args.count, max_tokens=args.max_tokens, concurrency=16)
    print("| cell | collapsed, text rules | collapsed, combined | model signal | median worst-window NLL |")
    print("|---|---|---|---|---|")
    for cell in expand(config):
        argv = build_launch(config, cell, 0).argv
        flags = [*argv[argv.index("evalkit.sim") + 1 :], "--sim-startup-seconds", "0"]
        result = run_repetition(settings, asgi_server(*flags, model=config.served))
        signal = result.metrics["model_signal"]
        text = sum(row["text_collapsed"] for row in result.samples)
        print(f"| {cell.id} | {text}/{signal['n']} | {result.metrics['collapsed']}/{signal['n']} | "
              f"{signal['flagged']} flagged, {signal['model_only']} alone | {signal['worst_nll_median']:.2f} |", flush=True)


def cost(args: argparse.Namespace) -> None:
    """The repetition eval on the simulator's healthy cell, in this process (server and client on
    the same CPUs), with the model signal off and on: wall and CPU seconds, and the requests sent."""
    from evalkit.sim.logprobs import known_pairs
    from tests.helpers.sim import asgi_server

    known_pairs([" a", " b"], 1)  # the simulated model's table, built once per process, not timed
    for enabled in (False, True, False, True):
        settings = RepetitionSettings(count=args.count, max_tokens=args.max_tokens, concurrency=16,
                                      model_signal=ModelSignalSettings(enabled=enabled))
        wall, cpu = time.perf_counter(), time.process_time()
        result = run_repetition(settings, asgi_server())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tokens = sum(row["metrics"]["n_tokens"] for row in result.samples)
        print(f"model signal {'on ' if enabled else 'off'}: {wall:6.1f} s wall, {cpu:6.1f} s CPU, "
              f"{len(result.samples)} generations of {tokens} tokens, {len(result.samples) * (1 + enabled)} requests",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("where", choices=("sim", "served", "demo", "cost"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5], help="sim: the simulator's seeds")
    parser.add_argument("--tune", action="store_true", help="print what margin and ceiling the data would choose")
    parser.add_argument("--prompt-set", default="long_generation_v1")
    parser.add_argument("--count", type=int, default=32, help="prompts per seed")
    parser.add_argument("--max-tokens", type=int, default=2000)
    parser.add_argument("--plant-tokens", type=int, default=200, help="degenerate tokens planted at least")
    parser.add_argument("--base-url", help="served: the engine's root URL")
    parser.add_argument("--served-name", help="served: the model name it serves")
    args = parser.parse_args()
    if args.where == "demo":
        demo(args)
    elif args.where == "cost":
        cost(args)
    elif args.where == "sim":
        from tests.helpers.sim import asgi_server

        run(lambda seed: asgi_server("--sim-seed", str(seed)), args.seeds, args, "seed")
    else:
        run(lambda _: Server(args.base_url, args.served_name), [0], args, "engine")


if __name__ == "__main__":
    main()

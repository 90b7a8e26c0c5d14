"""Where evalkit's GSM8K path spends its client time: lm-eval's share and evalkit's own.

Profiles one `run_gsm8k` (the third in the process, so imports and the task cache are warm)
against the zero-latency simulator and splits its time into lm-eval's client, prompt building,
scoring and bookkeeping, and evalkit's own pieces. cProfile inflates call-heavy code, so read
the shares, not the seconds.

    python benchmarks/gsm8k_share.py [--fewshot 3] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.evals import gsm8k  # noqa: E402
from evalkit.evals.base import EvalContext, Server  # noqa: E402
from evalkit.evals.gsm8k import GSM8KSettings  # noqa: E402
from evalkit.evals.lm_eval_adapter import TASK_DIR  # noqa: E402
from tests.helpers.sim import running_sim  # noqa: E402

OWN_HOOKS = ("amodel_call", "parse_generations", "record", "attempt", "fail", "prompt_key")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fewshot", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-share-"))
    settings = GSM8KSettings(num_fewshot=args.fewshot, num_concurrent=args.concurrency)
    gsm8k.write_task_yaml(tmp / TASK_DIR, settings)
    with running_sim(served="bench") as url:
        for _ in range(2):
            gsm8k.run_gsm8k(settings, EvalContext(Server(url, "bench"), tmp, tmp))
        profile = cProfile.Profile()
        profile.enable()
        gsm8k.run_gsm8k(settings, EvalContext(Server(url, "bench"), tmp, tmp))
        profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]

    def cumulative(match: Callable[[str, str], bool]) -> float:
        return sum(ct for (file, _, name), (_, _, _, ct, _) in stats.items() if match(file, name))

    def own(match: Callable[[str, str], bool]) -> float:
        return sum(tt for (file, _, name), (_, _, tt, _, _) in stats.items() if match(file, name))

    total = cumulative(lambda f, n: f.endswith("evals/gsm8k.py") and n == "run_gsm8k")
    parts = {
        "lm-eval client (generate_until: requests, retries, aiohttp, parsing)":
            cumulative(lambda f, n: f.endswith("models/api_models.py") and n == "generate_until"),
        "lm-eval prompt building (build_all_requests)": cumulative(lambda f, n: n == "build_all_requests"),
        "lm-eval scoring (filters, per-question metrics)":
            cumulative(lambda f, n: f.endswith("api/task.py") and n in ("apply_filters", "process_results")),
        "evalkit: copy of the cached task": cumulative(lambda f, n: n == "task_for_cell"),
        "evalkit: samples and metrics (_collect)": cumulative(lambda f, n: n == "_collect"),
        "evalkit: endpoint probe": cumulative(lambda f, n: n == "check_endpoint"),
    }
    parts["lm-eval: the rest of evaluate (bookkeeping, sample logging)"] = total - sum(parts.values())
    hooks = own(lambda f, n: f.endswith("evals/lm_eval_backends.py") and n in OWN_HOOKS)
    print(f"run_gsm8k under cProfile: {total:.2f} s (1319 questions, {args.fewshot}-shot, concurrency {args.concurrency})")
    for name, seconds in parts.items():
        print(f"  {name:<66} {seconds:5.2f} s {seconds / total:6.1%}")
    print(f"  {'  of the client: evalkit recording hooks (own time)':<66} {hooks:5.2f} s {hooks / total:6.1%}")
    evalkit = hooks + sum(v for k, v in parts.items() if k.startswith("evalkit"))
    print(f"  evalkit's own share {evalkit / total:.1%}, lm-eval's {1 - evalkit / total:.1%}")


if __name__ == "__main__":
    main()

"""What a running engine says about itself: its version, and its Prometheus counters around an eval.

Accuracy alone hides two things a matrix must show: whether the engine runs the source tree the
cell checked out (its version names a commit; evalkit/gitinfo.py compares them), and what the
engine did while an eval ran (tokens generated, time per output token, speculative decoding
acceptance). The counters are scraped before and after each eval and only their deltas are
kept, so tokens of the warm-up or of an earlier eval never count.

Nothing here raises: a version or a scrape that fails is returned with its reason, and the
cell records it as missing. An eval's score never depends on an endpoint that only informs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from evalkit.profiles import MetricNames, SpecCounts

TIMEOUT_S = 10.0
"""Per request: an engine busy decoding still answers /metrics in milliseconds."""


def read_version(base_url: str, path: str, timeout_s: float = TIMEOUT_S) -> tuple[str | None, str | None]:
    """(version, None), or (None, why not): `GET path` is JSON with a string `version`."""
    try:
        response = httpx.get(base_url + path, timeout=timeout_s)
        if response.status_code != 200:
            return None, f"GET {path}: HTTP {response.status_code}"
        version = response.json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        return None, f"GET {path}: {type(e).__name__}: {e}"
    if not isinstance(version, str) or not version:
        return None, f"GET {path}: no version in the answer"
    return version, None


@dataclass(frozen=True)
class Scrape:
    """One read of `/metrics`: every sample's value summed over its labels, by sample name."""

    totals: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    """How long the scrape took (request and parse)."""
    error: str | None = None
    """Why it failed; then `totals` is empty."""


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> sample name -> the sum over its label sets (DP engines, finish reasons)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def scrape(client: httpx.Client, base_url: str, path: str) -> Scrape:
    """Read `path` once; a failure is a `Scrape` with its reason, never an exception. `client` is
    the cell's, made once: building an httpx client (its TLS context) costs ~100 ms, a scrape ~1."""
    started = time.monotonic()
    try:
        response = client.get(base_url + path)
        if response.status_code != 200:
            error = f"GET {path}: HTTP {response.status_code}"
            return Scrape(seconds=round(time.monotonic() - started, 4), error=error)
        totals = parse(response.text)
    except httpx.HTTPError as e:
        return Scrape(seconds=round(time.monotonic() - started, 4), error=f"GET {path}: {type(e).__name__}: {e}")
    except ValueError as e:  # prometheus_client's parser on text that is not the exposition format
        return Scrape(seconds=round(time.monotonic() - started, 4), error=f"GET {path}: not Prometheus text ({e})")
    return Scrape(totals, round(time.monotonic() - started, 4))


def figures(before: Scrape, after: Scrape, names: MetricNames, path: str) -> dict[str, Any]:
    """What the engine did between two scrapes, as stored in cell.json `engine_metrics.<eval>`.

    `generation_tokens` (and `requests`) are counter deltas; `tpot_mean_s` is the mean per-request
    time per output token (histogram sum delta / count delta, over `tpot_n` requests); with spec
    decoding counters, `spec_acceptance_rate` is accepted / draft tokens and `spec_mean_accepted_len`
    1 + accepted / drafts (vLLM's own definitions); with a count of verify steps alone (SGLang's
    `spec_verify_calls_total`) `spec_mean_accepted_len` is generation tokens / verify steps, SGLang's
    own per-request definition (profiles/sglang.py). `missing` says why there are no figures.
    """
    out: dict[str, Any] = {"scrape_s": after.seconds}
    if before.error or after.error:
        return out | {"missing": before.error or after.error}

    def delta(name: str | None) -> float | None:
        if name is None or name not in after.totals:
            return None
        return after.totals[name] - before.totals.get(name, 0.0)

    tokens = delta(names.generation_tokens)
    if tokens is None:
        return out | {"missing": f"{path} has no {names.generation_tokens}"}
    out["generation_tokens"] = round(tokens)
    if (requests := delta(names.requests)) is not None:
        out["requests"] = round(requests)
    if names.tpot and (count := delta(names.tpot + "_count")) is not None:
        total = delta(names.tpot + "_sum") or 0.0
        out |= {"tpot_mean_s": total / count if count else None, "tpot_n": round(count)}
    drafts, draft_tokens, accepted = (delta(names.spec_drafts), delta(names.spec_draft_tokens),
                                      delta(names.spec_accepted_tokens))
    if draft_tokens is not None and accepted is not None:
        out |= {"spec_drafts": round(drafts or 0), "spec_draft_tokens": round(draft_tokens),
                "spec_accepted_tokens": round(accepted),
                "spec_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
                "spec_mean_accepted_len": 1 + accepted / drafts if drafts else None}
    elif drafts:  # verify steps only (SGLang): each yields its accepted tokens plus one
        out |= {"spec_drafts": round(drafts), "spec_mean_accepted_len": tokens / drafts}
    return out


def log_figures(counts: SpecCounts) -> dict[str, Any]:
    """Speculative decoding figures from the counts an engine logged in one eval's window (a profile's
    `spec_log`), under the same keys and definitions as `figures`; `spec_from` says where they came from."""
    return {"spec_from": "log", "spec_log_lines": counts.lines, "spec_drafts": counts.drafts,
            "spec_draft_tokens": counts.draft_tokens, "spec_accepted_tokens": counts.accepted_tokens,
            "spec_acceptance_rate": counts.accepted_tokens / counts.draft_tokens if counts.draft_tokens else None,
            "spec_mean_accepted_len": 1 + counts.accepted_tokens / counts.drafts if counts.drafts else None}

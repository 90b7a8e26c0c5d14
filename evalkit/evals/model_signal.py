"""The collapse signal from the model itself: how improbable a long generation is under its own engine.

Token soup in one script, code tokens in random order, a language the text rules were not tuned
on: the text alone may not tell them from healthy text, but the model that wrote the healthy
generations of the same prompts does. After its stream ends, each long generation of the
repetition eval is scored teacher-forced under the cell's own engine, in one request: the prompt
and the generated text as one completions prompt, ``echo`` with ``logprobs: 0`` and ``max_tokens``
1 (the divergence eval's shape: current vLLM turns ``max_tokens`` 0 with ``echo`` into one token
anyway). The positions whose text offset is at or past the prompt's end are the generation's.

The statistic per sample is the **worst window's NLL**: the largest mean negative log-likelihood,
in nats per token, over any ``window`` consecutive generated tokens (the whole text when shorter),
so a soup tail after hundreds of healthy tokens counts as soup, not as its average with them.

The rule, per cell: a sample is improbable when its worst window exceeds

* the median worst window of the cell's samples the text rules call healthy (its healthy
  generations of other prompts, scored by the same model) plus ``margin`` nats, given at least
  ``min_reference`` of them; or
* ``ceiling`` nats per token whatever the reference (a cell whose every sample is soup has no
  healthy reference, and no healthy model's own greedy text averages that much over a window).

The defaults were tuned on the simulator's seeds 1-2 and its error rates reported on seeds 3-5 and
on vLLM's CPU engine (`benchmarks/model_signal.py`, docs/divergence.md "The model's own signal").
A sample the rule flags is collapsed whatever the text rules said; its ``collapse_signals`` say
which fired. Where the engine serves no logprobs (ATOM, an external server without them), the
request is refused, or the endpoint is chat, the signal is *not measured*, with the reason, never
"ok"; a sample that was not scored is judged by the text rules alone.

Under the baseline's model instead, the same texts are scored by the divergence eval's
``generations`` (evals/divergence_generations.py): one model for every cell, read after the run.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from pydantic import Field

from evalkit import fastjson
from evalkit.evals.base import Comparison, EvalSettings, MetricDisplay, MetricSpec, Server
from evalkit.evals.http_client import Tries, with_retries
from evalkit.evals.prompts import Prompt
from evalkit.evals.units import NATS

RULE = "worst-window NLL > healthy median + margin, or > ceiling"
SPEC = MetricSpec("repetition.model_nll", Comparison.NONE,
                  MetricDisplay("median worst-window NLL of the long generations under the cell's own model"),
                  higher_is_better=False, unit=NATS)
"""The cell's figure in summary.json (nats per token); shown, never compared: the verdict is the
collapse rate, which counts the samples this signal flags."""


class ModelSignalSettings(EvalSettings):
    """Each long generation scored under the cell's own engine (module docstring)."""

    enabled: bool = Field(True, description="One teacher-forced request per long generation; off: text rules alone.")
    window: int = Field(64, ge=8, description="Generated tokens per window of the worst-window NLL.")
    margin: float = Field(5.5, gt=0, description="Nats per token above the healthy samples' median that flag a sample.")
    ceiling: float = Field(8.0, gt=0, description="Nats per token that flag a sample whatever the reference.")
    min_reference: int = Field(4, ge=1, description="Text-healthy samples the median needs; fewer: only the ceiling.")


def worst_window(nll: Sequence[float], window: int) -> tuple[float, int]:
    """(the largest mean of ``window`` consecutive values, where that window starts); the mean of
    all values when there are fewer."""
    values = np.asarray(nll, dtype=float)
    if len(values) <= window:
        return float(values.mean()), 0
    sums = np.convolve(values, np.ones(window), mode="valid")
    at = int(sums.argmax())
    return float(sums[at] / window), at


def _continuation(answer: Mapping[str, Any], prompt: str) -> list[float] | str:
    """The generated text's per-token NLLs from an echo answer, or why there are none."""
    choices = answer.get("choices") or [{}]
    lp = choices[0].get("logprobs") or {}
    logprobs, offsets = lp.get("token_logprobs"), lp.get("text_offset")
    if not logprobs or not offsets:
        return "the engine returned no echoed logprobs with text offsets"
    n = (answer.get("usage") or {}).get("prompt_tokens")
    n = n if isinstance(n, int) else len(logprobs) - 1  # the last one is the generated token
    return [-float(v) for v, at in zip(logprobs[:n], offsets[:n]) if v is not None and at >= len(prompt)]


async def score(client: httpx.AsyncClient, server: Server, item: Prompt, text: str,
                settings: ModelSignalSettings, endpoint: str) -> dict[str, Any]:
    """One teacher-forced request for the prompt and its generated ``text``: the sample's figures
    (tokens scored, mean and worst-window NLL, where the worst window starts) or ``unmeasured``
    with the reason. Transient failures are retried (`with_retries`); a 4xx answer is the reason,
    not an error: the engine cannot score this text (no logprobs, too long for its context)."""
    if not settings.enabled or endpoint == "chat":
        return {"unmeasured": "off in the config" if not settings.enabled else "chat generations are not scored"}
    prompt = item.prompt

    async def ask(tries: Tries) -> Mapping[str, Any] | str:
        body = {"model": server.served_name, "prompt": prompt + text, "max_tokens": 1, "temperature": 0,
                "echo": True, "logprobs": 0}
        response = await client.post("/v1/completions", json=body)
        if 400 <= response.status_code < 500 and response.status_code != 429:
            return f"HTTP {response.status_code}: {response.text[:200]}"
        if response.status_code != 200:  # one line (httpx's own message adds a second)
            raise httpx.HTTPStatusError(f"HTTP {response.status_code}", request=response.request, response=response)
        answer: Mapping[str, Any] = fastjson.loads(response.content)
        return answer

    answer = await with_retries(ask, f"repetition: scoring {item.id}")
    nll = _continuation(answer, prompt) if not isinstance(answer, str) else answer
    if isinstance(nll, str):
        return {"unmeasured": nll}
    if not nll:
        return {"unmeasured": "no generated token was scored"}
    worst, at = worst_window(nll, settings.window)
    return {"tokens": len(nll), "nll": float(np.mean(nll)), "worst_nll": worst, "worst_at": at}


def judge(samples: list[dict[str, Any]], settings: ModelSignalSettings) -> dict[str, Any]:
    """Flag each sample by the rule (module docstring), in place: ``model_flagged`` (None: not
    measured), ``text_collapsed`` (the text rules' verdict), ``collapsed`` (either) and
    ``collapse_signals``. Returns the cell's figures: how many were measured and flagged, the
    reference, the threshold and why a part was not measured."""
    for sample in samples:
        sample.setdefault("text_collapsed", bool(sample["collapsed"]))
    measured = [s for s in samples if (s.get("model_signal") or {}).get("worst_nll") is not None]
    reasons = sorted({s["model_signal"]["unmeasured"] for s in samples if "unmeasured" in (s.get("model_signal") or {})})
    reference = [s["model_signal"]["worst_nll"] for s in measured if not s["text_collapsed"]]
    median = statistics.median(reference) if len(reference) >= settings.min_reference else None
    threshold = settings.ceiling if median is None else min(settings.ceiling, median + settings.margin)
    for sample in samples:
        figures = sample.get("model_signal") or {}
        flagged = None if figures.get("worst_nll") is None else bool(figures["worst_nll"] > threshold)
        sample["model_flagged"] = flagged
        sample["model_threshold"] = threshold if flagged is not None else None
        sample["collapse_signals"] = [name for name, fired in (("text", sample["text_collapsed"]), ("model", flagged))
                                      if fired]
        sample["collapsed"] = bool(sample["collapse_signals"])
    worst = [s["model_signal"]["worst_nll"] for s in measured]
    return {
        "measured": len(measured), "n": len(samples),
        "flagged": sum(1 for s in samples if s["model_flagged"]),
        "model_only": sum(1 for s in samples if s["collapse_signals"] == ["model"]),
        "worst_nll_median": statistics.median(worst) if worst else None,
        "reference": {"n": len(reference), "median_worst_nll": median},
        "threshold": threshold, "rule": RULE, "settings": settings.model_dump(mode="json"),
        "unmeasured": reasons[0] if reasons and not measured else None,
        "unmeasured_samples": len(samples) - len(measured),
        "unmeasured_reasons": reasons[:3],
    }



def flat(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The repetition eval's flat figures of the signal: samples flagged and the median statistic."""
    signal = raw.get("model_signal") or {}
    if not signal.get("measured"):
        return {}
    return {"repetition.model_flagged": signal["flagged"], SPEC.name: signal["worst_nll_median"]}


def absent(raw: Mapping[str, Any]) -> dict[str, str]:
    """Why a cell has no `repetition.model_nll` (`capabilities.Unmeasured`): never read as passed."""
    signal = raw.get("model_signal") or {"unmeasured": "the run predates the model signal"}
    return {} if signal.get("measured") else {SPEC.name: f"not measured: {signal['unmeasured']}"}

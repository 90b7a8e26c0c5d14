"""An eval outside evalkit, as a user's package would hold one: a config names it
(`evals: {plugins: ["tests.plugin_evals:EVAL"]}`) and nothing registers it (tests/test_plugin_eval.py).

It asks the server a few short questions and measures the answers' length (continuous) and
whether each answered at all (paired per question). The other attributes are bad plugins, each
refused with a one-line error naming `evals.plugins[i]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import Field

from evalkit.evals.base import (
    Comparison,
    Eval,
    EvalContext,
    EvalDisplay,
    EvalResult,
    EvalSettings,
    MetricDisplay,
    MetricSpec,
)


class EchoSettings(EvalSettings):
    prompts: int = Field(2, ge=1, description="Questions asked per cell.")


class Echo(Eval):
    """Characters per answer, and answered or not per question."""

    name = "echo"
    settings_model = EchoSettings
    metrics = (
        MetricSpec("echo.chars", Comparison.CONTINUOUS,
                   MetricDisplay("characters per answer", key="chars", column="chars/answer", delta_label="chars")),
        MetricSpec("echo.answered", Comparison.PAIRED, MetricDisplay("answered"), mark_field="answered"),
    )
    display = EvalDisplay(title="echo", csv_fields=("echo.chars", "echo.n"))

    def run(self, ctx: EvalContext, settings: EchoSettings) -> EvalResult:
        samples = []
        for i in range(settings.prompts):
            answer = httpx.post(f"{ctx.server.base_url}/v1/completions", timeout=60, json={
                "model": ctx.server.served_name, "prompt": f"Question {i}: say hello.", "max_tokens": 16,
                "temperature": 0})
            answer.raise_for_status()
            text = answer.json()["choices"][0]["text"]
            samples.append({"id": f"q-{i}", "chars": len(text), "answered": bool(text.strip()), "text": text})
            ctx.progress(len(samples), settings.prompts)
        return EvalResult({"chars": sum(s["chars"] for s in samples) / len(samples), "n": len(samples),
                           "answered": sum(s["answered"] for s in samples) / len(samples)}, samples)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"echo.chars": raw["chars"], "echo.answered": raw["answered"], "echo.n": raw["n"]}


EVAL = Echo()


class Clashing(Echo):
    name = "gsm8k"


class Unprefixed(Echo):
    name = "echo2"


CLASHES = Clashing()
"""Named like a built-in eval."""
UNPREFIXED = Unprefixed()
"""Its metrics are named `echo.*`, not `echo2.*`."""
AGAIN = Echo()
"""Another eval named `echo`."""
NOT_AN_EVAL = {"name": "echo"}

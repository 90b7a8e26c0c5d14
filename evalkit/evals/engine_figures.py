"""`engine`: what the engine itself reported and how fast the client was served, as metrics.

A pseudo-eval (`LifecycleRecorded`): nothing is asked of the server for it. The cell lifecycle scrapes
the engine's `/metrics` around every real eval and times it (run/engine_report.py, stored as
cell.json `engine_metrics` and `throughput`); this eval reads those per-eval figures back
(`raw`) and sums them over the cell, so its metrics go wherever any eval's go (thresholds,
summary.json, every report format, compare, history) with no special case:

    thresholds:
      - {metric: engine.spec_acceptance_rate, min: 0.6}   # speculative decoding still accepts drafts
      - {metric: engine.tpot_s, max: 0.05}                # the engine's mean time per output token

A cell that cannot have a figure (an engine without speculative decoding, a failed scrape) says
why (`absent`), and a threshold on it is reported as not checked instead of passing silently.
Two flags no threshold expresses (`cell_flags`): an engine that does not run its source tree, and
a cell that got much faster than the baseline while collapsing more (loops are cheap to decode).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval, EvalDisplay, EvalSettings, MetricDisplay, MetricSpec
from evalkit.evals.units import SECONDS, SHARE, TOKENS, TOKENS_PER_S

FASTER = 1.5
"""tokens/s at least this many times the baseline's, with a significant rise in collapses: noted."""
COLLAPSE_RATE = "repetition.collapse_rate"
"""The rise that note is about (evals/repetition.py): a loop is cheap to decode, so a collapsing
cell runs faster. Not any count: the consistency eval's disagree share also rises in a buggy
cell, and whether that cell is faster then is only the box's load."""
NOTE_ALPHA = 0.01
"""How significant that rise must be (one-sided Fisher p below it); and an accuracy drop beside a
collapse of speculative acceptance (McNemar p below it)."""
ACCEPTANCE_COLLAPSE = 0.5
"""A cell's draft acceptance at most this share of its reference's is a collapse: said beside a
significant accuracy drop of the same cell (ATOM's DSpark nightly: ~46% -> 0% with GSM8K 0.95 -> 0.78)."""
TIMING_DEPENDENT = ("engine.tokens_per_s", "engine.tpot_s", "engine.generation_tokens")
"""The figures two runs of the same cell need not agree on, unlike every other metric (and nor
does a `faster_while_collapsing` flag built on them): speeds are wall-clock measurements, and the
engine's token count includes what it generated for an early-aborted stream before it saw the
abort (the client's count, `throughput`, does not)."""
VERIFY_ONLY = "the engine counts verify steps but no draft tokens (SGLang): no acceptance rate"
NO_SPEC = "the engine reported no speculative decoding counters (spec decoding off, or an engine without them)"


class EngineFiguresSettings(EvalSettings):
    """`evals.engine`: scrape the engine's /metrics around each eval (`enabled: false` stops the
    scrapes; the version check runs regardless, it is one request per cell)."""


def scraping_enabled(evals_config: Any) -> bool:
    """Whether a config's cells scrape their engine (its `evals.engine` section is on)."""
    settings = getattr(evals_config, EngineFigures.name, None)
    return settings is not None and settings.enabled


def _per_second(flat: Mapping[str, Any]) -> str:
    value = flat.get("engine.tokens_per_s")
    return "-" if value is None else f"{value:.0f}"


def _ms(flat: Mapping[str, Any]) -> str:
    value = flat.get("engine.tpot_s")
    return "-" if value is None else f"{value * 1000:.2f} ms"


def _sum(rows: list[Mapping[str, Any]], key: str) -> float:
    total: float = sum(row[key] for row in rows)  # an int stays an int (a token count)
    return total


class EngineFigures(Eval):
    """The engine's figures: recorded by the lifecycle (`LifecycleRecorded`), a cell may lack some
    (`Unmeasured`), and two flags no threshold expresses (`CellFlags`)."""

    name = "engine"
    settings_model = EngineFiguresSettings
    metrics = (
        MetricSpec("engine.tokens_per_s", Comparison.CONTINUOUS,
                   MetricDisplay("output tokens/s", key="tokens/s", column="tokens/s", text=_per_second),
                   unit=TOKENS_PER_S),
        MetricSpec("engine.tpot_s", Comparison.CONTINUOUS,
                   MetricDisplay("engine TPOT", key="TPOT", column="engine TPOT", text=_ms), higher_is_better=False,
                   unit=SECONDS),
        MetricSpec("engine.spec_acceptance_rate", Comparison.CONTINUOUS,
                   MetricDisplay("spec decoding acceptance rate", key="spec_acceptance", column="spec accept",
                                 column_when_measured=True), unit=SHARE),
        MetricSpec("engine.spec_accepted_len", Comparison.CONTINUOUS,
                   MetricDisplay("spec decoding mean accepted length", key="spec_accepted_len"), unit=TOKENS),
        MetricSpec("engine.generation_tokens", Comparison.NONE,
                   MetricDisplay("engine generation tokens", key="generation_tokens"), unit=TOKENS),
    )
    display = EvalDisplay(title="engine", csv_fields=tuple(spec.name for spec in metrics))

    def raw(self, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
        figures, speed = record.get("engine_metrics") or {}, record.get("throughput") or {}
        return {"engine_metrics": figures, "throughput": speed} if figures or speed else None

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The cell's figures over all its evals: totals first, then the ratios of the totals."""
        figures = [f for f in raw.get("engine_metrics", {}).values() if "missing" not in f]
        counted = [f for f in figures if "generation_tokens" in f]  # not where only the log spoke (ATOM)
        speed = [t for t in raw.get("throughput", {}).values() if t.get("tokens_per_s") is not None]
        timed = [f for f in figures if f.get("tpot_n") and f.get("tpot_mean_s") is not None]
        spec = [f for f in figures if "spec_draft_tokens" in f]
        out: dict[str, Any] = {}
        if speed:
            out["engine.tokens_per_s"] = _sum(speed, "completion_tokens") / _sum(speed, "wall_s")
        if counted:
            out["engine.generation_tokens"] = _sum(counted, "generation_tokens")
        if timed:
            out["engine.tpot_s"] = sum(f["tpot_mean_s"] * f["tpot_n"] for f in timed) / _sum(timed, "tpot_n")
        if spec and _sum(spec, "spec_draft_tokens"):
            out["engine.spec_acceptance_rate"] = _sum(spec, "spec_accepted_tokens") / _sum(spec, "spec_draft_tokens")
        if spec and _sum(spec, "spec_drafts"):
            out["engine.spec_accepted_len"] = 1 + _sum(spec, "spec_accepted_tokens") / _sum(spec, "spec_drafts")
        verify_only = [f for f in figures if f.get("spec_drafts") and "spec_draft_tokens" not in f]
        if verify_only and not spec:  # SGLang counts verify steps only: tokens per step
            out["engine.spec_accepted_len"] = _sum(verify_only, "generation_tokens") / _sum(verify_only, "spec_drafts")
        return out

    def absent(self, raw: Mapping[str, Any]) -> dict[str, str]:
        flat = self.flat(raw)
        figures = raw.get("engine_metrics", {})
        missing = next((f["missing"] for f in figures.values() if "missing" in f), None)
        scraped = [f for f in figures.values() if "missing" not in f]
        logged_only = bool(scraped) and all("generation_tokens" not in f for f in scraped)
        why: dict[str, str] = {}
        for spec in self.metrics:
            if spec.name in flat:
                continue
            if spec.name == "engine.tokens_per_s":
                why[spec.name] = "no token counts: the answers carried no usage and the engine was not scraped"
            elif not scraped:
                why[spec.name] = f"no engine metrics ({missing or 'not scraped'})"
            elif logged_only and spec.name in ("engine.tpot_s", "engine.generation_tokens"):
                why[spec.name] = "only the engine's log spoke (speculative decoding counts): no /metrics scraped"
            elif spec.name == "engine.tpot_s":
                why[spec.name] = "the engine reported no timed requests (no TPOT histogram)"
            else:
                has_spec = any("spec_draft_tokens" in f for f in scraped)
                verify_only = any("spec_drafts" in f for f in scraped)
                why[spec.name] = ("no draft tokens were proposed" if has_spec else
                                  VERIFY_ONLY if verify_only else NO_SPEC)
        return why

    def cell_flags(self, record: Mapping[str, Any], row: Mapping[str, Any],
                   baseline: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        out = []
        check = record.get("engine_check") or {}
        if check.get("status") == "mismatch":
            out.append({"metric": "engine.version", "check": "source", "action": "warn",
                        "message": f"{row['id']}: {check['message']}"})
        out += _accuracy_with_acceptance(record, row)
        if baseline is None or baseline["id"] == row["id"]:
            return out
        mine, theirs = row["metrics"].get("engine.tokens_per_s"), baseline["metrics"].get("engine.tokens_per_s")
        if not mine or not theirs or mine < FASTER * theirs:
            return out
        found = (row.get("vs_baseline") or {}).get(COLLAPSE_RATE) or {}
        if (found.get("diff") or 0) > 0 and found.get("p_value") is not None and found["p_value"] < NOTE_ALPHA:
            out.append({"metric": "engine.tokens_per_s", "check": "faster_while_collapsing", "action": "warn",
                        "message": f"{row['id']}: faster while collapsing: loops are cheap to decode "
                                   f"({mine / theirs:.1f}x the baseline's tokens/s while collapse rate rose "
                                   f"{found['diff'] * 100:+.1f} points, Fisher p = {found['p_value']:.2g})"})
        return out


def _accuracy_with_acceptance(record: Mapping[str, Any], row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flag when, against its fix-on twin (else the baseline), the cell's speculative acceptance
    collapsed and a per-question score dropped significantly: the draft stopped agreeing with a
    target that went wrong, which no single threshold says (and a rate that fell alone is only a
    slower engine)."""
    rate = row["metrics"].get("engine.spec_acceptance_rate")
    paired = [spec for spec in registry.builtins().metrics(None, [record])
              if spec.comparison is Comparison.PAIRED and spec.higher_is_better]
    for key, word in (("vs_ab", "its fix-on twin"), ("vs_baseline", "the baseline")):
        deltas = row.get(key) or {}
        fell = (deltas.get("engine.spec_acceptance_rate") or {}).get("diff")
        if rate is None or fell is None or rate - fell <= 0 or rate > ACCEPTANCE_COLLAPSE * (rate - fell):
            continue
        drops = [(spec, found) for spec in paired if (found := deltas.get(spec.name) or {}).get("diff") is not None
                 and found["diff"] < 0 and found.get("p_value") is not None and found["p_value"] < NOTE_ALPHA]
        if drops:
            said = ", ".join(f"{spec.display.label} {found['diff'] * 100:+.1f} points (McNemar p = {found['p_value']:.2g})"
                             for spec, found in drops)
            return [{"metric": "engine.spec_acceptance_rate", "check": "accuracy_with_acceptance", "action": "warn",
                     "message": f"{row['id']}: accuracy fell with speculative acceptance against {word}: {said}, while "
                                f"draft acceptance fell {rate - fell:.3f} -> {rate:.3f}"}]
    return []


EVAL = registry.register(EngineFigures())

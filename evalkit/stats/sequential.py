"""When to stop a bisect step: a sequential test, step vs the good end, after every batch.

A bisect step runs one commit's cell on GSM8K questions and long generations in a fixed seeded
order, in batches; after each batch `StepTest.judge` says bad / good / undecided, so a commit
that plainly has the bug (or plainly has not) stops after a small share of the questions.

Contract (what evalkit/bisect/ uses)::

    PairedCounts(n, lost, gained)      # step vs good end on the n questions both answered so far
    Count(k, n)                        # k collapsed long generations out of n
    test = StepTest.from_ends(paired_bad=PairedCounts | None,        # bad end vs good end
                              collapses_good=Count | None, collapses_bad=Count | None,
                              alpha=0.01, beta=None)                 # beta None -> alpha
    test.judge(paired: PairedCounts | None, collapses: Count | None, *, exhausted: bool)
        -> Judgement(verdict "bad" | "good" | "undecided", reason, statistics)
        # exhausted=True never gives "undecided"; with no data at all it raises ValueError
    batch_schedule(questions, generations) -> ((q1, g1), (q2, g2), ...)   # cumulative looks
    simulate(test, lost=, gained=, collapse=, looks=, trials=, seed=) -> Simulation

Counts are cumulative (everything the step has answered so far), so `judge` is stateless: the
likelihood ratios below depend on the data only through these counts. `Judgement.statistics`
holds per eval ("gsm8k", "collapses") the counts, `log_lr_bad` / `bad_at` (its log boundary),
`log_lr_good` / `good_at`, `p_bound` (an anytime-valid p-value: 1/LR, plus delta for
collapses) and the hypotheses' rates; "joint" the product's (with both evals); and
`decided_by`: "boundary", "exhausted" or None.

Why these tests. Each side is a Wald sequential probability ratio test (Wald 1945, "Sequential
tests of statistical hypotheses", Ann. Math. Statist. 16:117-186) read as a test martingale: a
likelihood ratio against a hypothesis is a nonnegative (super)martingale with mean <= 1 under
it, so by Ville's inequality (Ville 1939; Howard, Ramdas, McAuliffe & Sekhon 2021,
"Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2),
section 2) P(the ratio EVER reaches 1/a) <= a. That holds over any number of looks at any batch
sizes, and stopping early is free: the false-alarm rate is anytime-valid, which a fixed-sample
McNemar or Fisher test repeated after every batch is not (the tests show it reaching > 2 alpha).

- GSM8K (McNemar's idea made sequential). Only discordant questions carry evidence. If the step
  behaves like the good end, a discordant question is a loss or a gain with chance 1/2 whatever
  the (unknown) flip rate between two healthy runs, so the ratio over discordant pairs of q (the
  bad end's loss share, at its one-sided 90% lower bound) to 1/2 is a martingale under H0 with
  no nuisance parameter: bad when it reaches 1/alpha_gsm8k. Deciding GOOD needs another ratio:
  a deterministic engine answers a healthy commit exactly like the good end, with no discordant
  question to move the first one. So the good side tests the per-question loss rate: H1 "at
  least lambda1" (the bad end's, 90% lower bound) against a mixture of rates below it (half
  at the flip rate the ends show, half uniform: `_log_e_below`): good at 1/beta, and P_H1(ever) <= beta for any step losing >= lambda1,
  whatever the flip rate. (Questions come in a seeded random order from a finite pool, i.e.
  without replacement; that concentrates counts more than the iid model assumes, Hoeffding
  1963, so few losses early leave more for later.)
- Collapses (Fisher's question made sequential). The good end's rate is uncertain (often 0 of
  64), so H0 takes a conservative null rate u: the one-sided (1 - delta) Clopper-Pearson upper
  bound of the good end's count. The ratio of v (the bad end's rate, 90% lower bound) to u is a
  supermartingale for any step rate <= u, so P(false alarm) <= delta (u was too low) + the
  SPRT's share (Ville); the tests draw the good end's count too.
  Good side: rate >= v against the mixture below v, at 1/beta, as for GSM8K.

Combining. Bad: the two bad-side ratios multiply into one test martingale under H0 (the
questions and the generations are separate, independent samples; Vovk & Wang 2021, "E-values:
calibration, combination and applications", Ann. Statist. 49(3)), so weak evidence in both adds
up; each eval alone can also decide, for a bug that shows in one eval only. Alpha is split
(Bonferroni): delta = alpha/4 for the collapse null's upper bound, then half of the rest to the
product and a quarter to each eval alone; with one informative eval (the ends separate only on
one: e.g. a bad end that collapses but answers GSM8K like the good end, or no repetition eval)
it gets all of alpha but delta = alpha/2. Bad when ANY of these crosses: false alarm <= their
sum = alpha. Good: when EVERY informative eval crosses its good boundary (miss <= beta: each
alone bounds it; an eval with no data yet blocks "good"). Ends with no informative eval raise
ValueError. The guarantee is per step: a bisect of ~log2(commits) steps errs somewhere with
chance at most steps x (alpha + beta) (union bound); pass a smaller alpha for a per-bisect one.

A single collapse when the good end had none multiplies the collapse ratio by v/u: 2.8 at the
demo (21/64 vs 0/64, alpha 0.01); with GSM8K showing nothing, 6 of the first 8 generations (or 8
of 20) decide bad. With point estimates instead ((k+1/2)/(n+1) for both ends) it would be a
Bayes factor of 43, "very strong" on Jeffreys' scale; the guarantee cannot count it so, because
0/64 does not rule out a good-end loop rate of a few percent (healthy models loop now and then).

`exhausted=True` (no questions or generations left) always returns good or bad: when no
boundary was crossed, bad if the summed log evidence against "like the good end" exceeds the
summed log evidence against "like the bad end" (the likelier end), else good. Those verdicts
are NOT at alpha; the reason says so and `decided_by` is "exhausted". In the simulations the
fallback added no false alarm beyond alpha; at the demo effect on the full 1319 questions and
64 generations it is (almost) never reached. Measured costs: tests/test_sequential.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from scipy.special import betainc, betaln
from scipy.stats import beta as beta_dist

from evalkit.stats.tests import wilson_interval

__all__ = ["PairedCounts", "Count", "Judgement", "StepTest", "batch_schedule", "Simulation", "simulate",
           "log_e_above"]

Verdict = Literal["bad", "good", "undecided"]
_VERDICT_OF_CODE: dict[int, Verdict] = {1: "bad", -1: "good", 0: "undecided"}

ALTERNATIVE_LEVEL = 0.90
"""One-sided confidence of the lower bounds that shrink the bad end's effect into H1: a commit
with the bug but a slightly smaller effect than the bad end showed (run-to-run noise) is still
covered by the miss-rate bound, at the price of a few more questions per step."""


def _check_integers(what: str, **fields: Any) -> None:
    for name, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{what}: {name} must be an integer, got {value!r}")


@dataclass(frozen=True)
class PairedCounts:
    """A step (or the bad end) vs the good end on the `n` GSM8K questions both answered:
    `lost` = right at the good end and wrong here, `gained` = wrong there and right here."""

    n: int
    lost: int
    gained: int

    def __post_init__(self) -> None:
        _check_integers("paired", n=self.n, lost=self.lost, gained=self.gained)
        if not (0 <= self.lost and 0 <= self.gained and self.lost + self.gained <= self.n):
            raise ValueError(f"paired: need 0 <= lost, gained and lost + gained <= n, got {self}")


@dataclass(frozen=True)
class Count:
    """`k` events (collapsed long generations) out of `n`."""

    k: int
    n: int

    def __post_init__(self) -> None:
        _check_integers("collapses", k=self.k, n=self.n)
        if not 0 <= self.k <= self.n:
            raise ValueError(f"collapses: need 0 <= k <= n, got {self.k}/{self.n}")


@dataclass(frozen=True)
class Judgement:
    """The verdict after one look, a one-line reason for the report, and per eval the
    statistics behind it (log likelihood ratios, boundaries, anytime p-value bounds)."""

    verdict: Verdict
    reason: str
    statistics: dict[str, Any]


def _log_e_below(n: Any, k: Any, top: float, expected: float) -> Any:
    """log of a mixture likelihood ratio for "the rate is below `top`" against "it is `top` or
    more": the likelihood of k events in n averaged over a prior on rates below `top`, over
    the likelihood at `top`. For every rate r < top, L(r)/L(top) is a supermartingale whenever
    the true rate is >= top, so any such mixture is too (Robbins 1970's mixture SPRT; Howard et
    al. 2021). The prior: half a point mass at `expected` (the rate the good end predicts, fixed
    before the step: fast when the engine is as deterministic as the ends suggest), half uniform
    on [0, top) (no rate to guess when it is not). Closed form: regularised incomplete beta."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(divide="ignore"):
        uniform = betaln(k + 1, n - k + 1) + np.log(betainc(k + 1, n - k + 1, top)) - math.log(top)
        log_top = k * math.log(top) + (n - k) * math.log1p(-top)
        if expected >= top:
            mixture = uniform
        else:
            hits = k * math.log(expected) if expected > 0 else np.where(k > 0, -np.inf, 0.0)
            point = hits + (n - k) * math.log1p(-expected)
            mixture = np.logaddexp(uniform, point) - math.log(2)
    return np.maximum(mixture - log_top, -700.0)


def log_e_above(n: Any, k: Any, floor: float) -> Any:
    """log of a mixture likelihood ratio for "the rate is above `floor`" against "it is `floor`":
    `_log_e_below` on the complementary events (a rate above `floor` is a non-event rate below
    1 - `floor`), with the uniform prior alone (no rate to guess). A test martingale for every
    true rate at most `floor`, so P(it EVER reaches 1/a) <= a (Ville): what a matrix cell's
    stopping rule (run/stopping.py) asks of its collapses before it stops them."""
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"floor must be in [0, 1), got {floor!r}")
    k = np.asarray(k, dtype=float)
    return _log_e_below(n, np.asarray(n, dtype=float) - k, 1.0 - floor, 1.0)


@dataclass(frozen=True)
class _PairedTest:
    """GSM8K: bad side on discordant pairs (loss share q vs 1/2), good side on the loss rate
    (rates below lambda1 vs lambda1; lambda0 = the bad end's gain rate, the flips' expected
    rate). `alpha` is this eval's own share."""

    q: float
    lambda1: float
    lambda0: float
    alpha: float

    def log_bad(self, n: Any, lost: Any, gained: Any) -> Any:
        return lost * math.log(2 * self.q) + gained * math.log(2 * (1 - self.q))

    def log_good(self, n: Any, lost: Any, gained: Any) -> Any:
        return _log_e_below(n, lost, self.lambda1, self.lambda0)


@dataclass(frozen=True)
class _CountTest:
    """Collapses: bad side v vs the conservative null u, good side rates below v vs v (r0 =
    the good end's observed rate). `alpha` is this eval's own share; `delta`, spent on u being
    an upper bound, is apart."""

    u: float
    v: float
    r0: float
    alpha: float
    delta: float

    def log_bad(self, n: Any, k: Any) -> Any:
        return k * math.log(self.v / self.u) + (n - k) * math.log((1 - self.v) / (1 - self.u))

    def log_good(self, n: Any, k: Any) -> Any:
        return _log_e_below(n, k, self.v, self.r0)


def _check_level(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")


def _paired_test(bad: PairedCounts) -> _PairedTest | None:
    """None when the bad end does not lose clearly more questions than it gains."""
    confidence = 2 * ALTERNATIVE_LEVEL - 1  # the two-sided interval whose low end is one-sided
    disc = bad.lost + bad.gained
    q = wilson_interval(bad.lost, disc, confidence)[0] if disc else 0.0
    lambda1 = wilson_interval(bad.lost, bad.n, confidence)[0] if bad.n else 0.0
    if q <= 0.5 or lambda1 <= 0.0:
        return None
    return _PairedTest(q=min(q, 0.99), lambda1=lambda1, lambda0=bad.gained / bad.n, alpha=1.0)


def _count_test(good: Count, bad: Count, delta: float) -> _CountTest | None:
    """None when the bad end's rate does not clearly exceed the good end's upper bound."""
    u = 1.0 if good.k == good.n else float(beta_dist.ppf(1 - delta, good.k + 1, good.n - good.k))
    v = 0.0 if bad.k == 0 else float(beta_dist.ppf(1 - ALTERNATIVE_LEVEL, bad.k, bad.n - bad.k + 1))
    v = min(v, 0.99)
    if v <= u:
        return None
    return _CountTest(u=u, v=v, r0=good.k / good.n, alpha=1.0, delta=delta)


@dataclass(frozen=True)
class StepTest:
    """The sequential test for every middle step of one bisect, built once from the two ends.

    `paired` / `collapses` are None when that eval is absent at an end or does not separate
    the ends (see the module docstring); at least one is set. `joint_alpha` is the share of
    the product of both bad-side ratios (None with one eval)."""

    alpha: float
    beta: float
    paired: _PairedTest | None
    collapses: _CountTest | None
    joint_alpha: float | None

    @classmethod
    def from_ends(cls, *, paired_bad: PairedCounts | None, collapses_good: Count | None,
                  collapses_bad: Count | None, alpha: float, beta: float | None = None) -> StepTest:
        """Build H1 from the bad end and H0 from the good end, and split alpha (module
        docstring). `beta` (the miss rate: calling a bad commit good) defaults to alpha, since
        either error sends the bisect the wrong way. Raises ValueError naming the field when an
        input is invalid or no eval separates the ends."""
        _check_level("alpha", alpha)
        beta = alpha if beta is None else beta
        _check_level("beta", beta)
        paired = _paired_test(paired_bad) if paired_bad is not None and paired_bad.n else None
        counts = None
        if collapses_good is not None and collapses_bad is not None and collapses_good.n and collapses_bad.n:
            counts = _count_test(collapses_good, collapses_bad, alpha / (4 if paired else 2))
        if paired is None and counts is None:
            raise ValueError("ends: the bad end shows neither a GSM8K loss nor a collapse rise "
                             "over the good end that a step could be tested against")
        rest = alpha - (counts.delta if counts else 0.0)
        joint = rest / 2 if paired and counts else None
        alone = rest / 4 if joint else rest
        return cls(alpha, beta, paired and replace(paired, alpha=alone),
                   counts and replace(counts, alpha=alone), joint)

    def judge(self, paired: PairedCounts | None, collapses: Count | None, *,
              exhausted: bool) -> Judgement:
        """Verdict on everything the step answered so far (cumulative counts; None = no data
        yet for that eval). Never "undecided" when `exhausted`; raises ValueError when
        exhausted with no data at all (the step answered nothing: untestable, not a verdict)."""
        p = paired or PairedCounts(0, 0, 0)
        c = collapses or Count(0, 0)
        if exhausted and not (self.paired and p.n) and not (self.collapses and c.n):
            raise ValueError("judge: exhausted before any question or generation was answered")
        code, fallback, logs = self._decide(np.array(p.n), np.array(p.lost), np.array(p.gained),
                                            np.array(c.n), np.array(c.k), exhausted)
        verdict = _VERDICT_OF_CODE[int(code)]
        statistics: dict[str, Any] = {
            "decided_by": None if verdict == "undecided" else "exhausted" if bool(fallback) else "boundary"}
        good_at = -math.log(self.beta)
        if self.paired:
            t = self.paired
            bad_log, good_log = (float(x) for x in logs["gsm8k"])
            statistics["gsm8k"] = {
                "n": int(p.n), "lost": int(p.lost), "gained": int(p.gained), "alpha": t.alpha,
                "log_lr_bad": bad_log, "bad_at": -math.log(t.alpha),
                "log_lr_good": good_log, "good_at": good_at, "p_bound": min(1.0, math.exp(-bad_log)),
                "loss_share_h1": t.q, "loss_rate_h1": t.lambda1, "loss_rate_h0": t.lambda0}
        if self.collapses:
            c_t = self.collapses
            bad_log, good_log = (float(x) for x in logs["collapses"])
            statistics["collapses"] = {
                "n": int(c.n), "k": int(c.k), "alpha": c_t.alpha,
                "log_lr_bad": bad_log, "bad_at": -math.log(c_t.alpha),
                "log_lr_good": good_log, "good_at": good_at,
                "p_bound": min(1.0, c_t.delta + math.exp(-bad_log)),
                "rate_h1": c_t.v, "rate_h0_bound": c_t.u, "rate_h0": c_t.r0, "delta": c_t.delta}
        if self.joint_alpha:
            assert self.collapses is not None, "joint_alpha is set only with both tests"
            joint_log = float(logs["gsm8k"][0] + logs["collapses"][0])
            statistics["joint"] = {"alpha": self.joint_alpha, "log_lr_bad": joint_log,
                                   "bad_at": -math.log(self.joint_alpha),
                                   "p_bound": min(1.0, self.collapses.delta + math.exp(-joint_log))}
        return Judgement(verdict, _reason(verdict, bool(fallback), statistics), statistics)

    def _decide(self, n: np.ndarray, lost: np.ndarray, gained: np.ndarray, m: np.ndarray,
                k: np.ndarray, exhausted: bool) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Vectorised verdicts (1 bad, -1 good, 0 undecided), whether the exhausted fallback
        gave them, and per eval (log LR bad, log LR good): one code path for `judge` and
        `simulate`, so the simulation tests exactly what bisect runs."""
        logs: dict[str, Any] = {}
        bad = np.zeros(np.shape(n), dtype=bool)
        if self.paired:
            logs["gsm8k"] = (self.paired.log_bad(n, lost, gained), self.paired.log_good(n, lost, gained))
            bad |= logs["gsm8k"][0] >= -math.log(self.paired.alpha)
        if self.collapses:
            logs["collapses"] = (self.collapses.log_bad(m, k), self.collapses.log_good(m, k))
            bad |= logs["collapses"][0] >= -math.log(self.collapses.alpha)
        log_bad = sum(bad_log for bad_log, _ in logs.values())
        if self.joint_alpha:
            bad |= log_bad >= -math.log(self.joint_alpha)
        good = np.ones(np.shape(n), dtype=bool)
        for _, good_log in logs.values():
            good &= good_log >= -math.log(self.beta)
        code = np.where(bad, 1, np.where(good, -1, 0))
        fallback = (code == 0) & exhausted
        # the likelier end: the evidence against "like the good end" vs against "like the bad end"
        score = log_bad - sum(good_log for _, good_log in logs.values())
        code = np.where(fallback, np.where(score > 0, 1, -1), code)
        return code, fallback, logs


def _reason(verdict: Verdict, fallback: bool, stats: dict[str, Any]) -> str:
    """One line for the report: the counts and the evidence that decided (or would)."""
    parts = []
    for name, s in (("GSM8K", stats.get("gsm8k")), ("collapses", stats.get("collapses"))):
        if s is None:
            continue
        counts = (f"lost {s['lost']} / gained {s['gained']} of {s['n']}" if "lost" in s
                  else f"{s['k']}/{s['n']} collapsed")
        parts.append(f"{name} {counts} (LR bad {_e(s['log_lr_bad'])} of {_e(s['bad_at'])}, "
                     f"good {_e(s['log_lr_good'])} of {_e(s['good_at'])})")
    if "joint" in stats:
        parts.append(f"both (LR bad {_e(stats['joint']['log_lr_bad'])} of {_e(stats['joint']['bad_at'])})")
    evidence = "; ".join(parts)
    if fallback:
        return f"{verdict}, the likelier end (all answered, no boundary crossed: not at alpha): {evidence}"
    return f"{verdict}: {evidence}"


def _e(log_value: float) -> str:
    return f"{math.exp(min(700.0, log_value)):.3g}"


def batch_schedule(questions: int, generations: int, *, first_questions: int = 32,
                   first_generations: int = 8, growth: float = 1.5) -> tuple[tuple[int, int], ...]:
    """Cumulative (questions, generations) after each batch, the last being the whole pool
    (judge it with exhausted=True). The j-th batch holds first * growth**j of each: small first
    batches stop plain cases early, growing ones keep the number of looks (engine round trips)
    logarithmic in the pool; growth=1 gives fixed batches. The test is valid at any schedule;
    this one is what the simulations (and the step runner) use."""
    for name, value in (("questions", questions), ("generations", generations)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    for name, value in (("first_questions", first_questions), ("first_generations", first_generations)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if growth < 1:
        raise ValueError(f"growth must be >= 1, got {growth}")
    looks: list[tuple[int, int]] = []
    q = g = 0.0
    batch_q, batch_g = float(first_questions), float(first_generations)
    while not looks or looks[-1] != (questions, generations):
        q, g = q + batch_q, g + batch_g
        looks.append((min(questions, round(q)), min(generations, round(g))))
        batch_q, batch_g = batch_q * growth, batch_g * growth
    return tuple(looks)


@dataclass(frozen=True)
class Simulation:
    """Monte Carlo operating characteristics of a StepTest at one truth."""

    trials: int
    bad: float                  # share of trials judged bad
    good: float                 # share judged good
    exhausted: float            # share decided only by the exhausted fallback
    mean_questions: float       # questions used until the verdict
    mean_generations: float


def simulate(test: StepTest, *, lost: float, gained: float, collapse: float,
             looks: Sequence[tuple[int, int]], trials: int = 10_000, seed: int = 0) -> Simulation:
    """Run `trials` steps whose questions are lost / gained with these per-question chances
    and whose generations collapse with chance `collapse`, judged at `looks` (the last one
    exhausted). Vectorised over trials (numpy): iid draws per batch are multinomial counts,
    so 10,000 trials cost milliseconds."""
    for name, value in (("lost", lost), ("gained", gained), ("collapse", collapse), ("lost + gained", lost + gained)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
    if not looks or any(b[0] < a[0] or b[1] < a[1] for a, b in zip(looks, looks[1:])):
        raise ValueError(f"looks must be a non-empty, non-decreasing list of cumulative counts, got {looks}")
    rng = np.random.default_rng(seed)
    same = 1.0 - lost - gained
    verdict = np.zeros(trials, dtype=int)
    used_q = np.zeros(trials)
    used_g = np.zeros(trials)
    by_fallback = np.zeros(trials, dtype=bool)
    n = lo = ga = m = k = np.zeros(trials, dtype=np.int64)
    previous = (0, 0)
    for index, (q, g) in enumerate(looks):
        draws = rng.multinomial(q - previous[0], [lost, gained, same], size=trials)
        n, lo, ga = n + q - previous[0], lo + draws[:, 0], ga + draws[:, 1]
        m, k = m + g - previous[1], k + rng.binomial(g - previous[1], collapse, size=trials)
        previous = (q, g)
        code, fallback, _ = test._decide(n, lo, ga, m, k, exhausted=index == len(looks) - 1)
        fresh = (verdict == 0) & (code != 0)
        verdict[fresh], used_q[fresh], used_g[fresh] = code[fresh], q, g
        by_fallback |= fresh & fallback
    return Simulation(trials, float(np.mean(verdict == 1)), float(np.mean(verdict == -1)),
                      float(np.mean(by_fallback)), float(used_q.mean()), float(used_g.mean()))

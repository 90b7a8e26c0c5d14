"""One middle commit of a bisect: one engine start, batches of questions until the verdict is decided.

A step is a cell like any other (run/cell.py's one lifecycle: the engine started on the commit's
worktree, readiness, the body, stop, cell.json); only its body differs from a matrix cell's. It
asks the questions the good end answered, and generates the long-generation prompts the good end
generated, each in a fixed order seeded by `seed` (the same for every step, so two steps ask the
same questions first), in the growing batches of `sequential.batch_schedule`. After each batch
the sequential test built from the two ends (`Ends.test`) judges everything answered so far
against the good end's stored samples: the GSM8K marks paired per question (lost: right at the
good end, wrong here; gained: the reverse) and the collapses counted. The step stops at the first
batch that decides; the last batch (everything asked) always decides.

Only evals that can run a subset (`Subsets`) and that the test uses are run; the others are
named in the step's notes. The cell folder holds what a run's holds (cell.json with the metrics
of the questions actually asked, `Subsets.combine`d over the batches, and their samples), plus
cell.json `step`: the verdict, every look's statistics and the evidence (deltas vs the good end
with the matrix's fixed-sample p-values, one collapsed excerpt).

An engine that does not start, crashes or prints a fatal line makes the step `untestable` with
the cell's one-line error (`git bisect skip`); a stop (Ctrl-C) raises `Interrupted` and writes
no cell.json, so a resumed bisect runs the step again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evalkit.bisect.ends import Ends, label
from evalkit.errors import ConfigError, Interrupted
from evalkit.evals import evalset
from evalkit.evals.base import Eval, EvalResult, MetricSpec, Server
from evalkit.evals.capabilities import Subsets
from evalkit.evals.evalset import EvalSet, eval_name, spec_named
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.parts import CellPart, EvalRun, Step
from evalkit.stats.sequential import Count, Judgement, PairedCounts, batch_schedule
from evalkit.store import read_json, read_jsonl, write_jsonl
from evalkit.store.records import CellRecord
from evalkit.verdict.deltas import deltas_between, flat_metrics, marks, question_order

StepVerdict = Literal["good", "bad", "untestable"]


@dataclass
class StepOutcome:
    """What one step concluded; `record` is what its cell.json holds."""

    verdict: StepVerdict
    reason: str
    """One line: the test's counts and evidence, or the engine's error when untestable."""
    questions: int
    """GSM8K questions asked (of the good end's)."""
    generations: int
    """Long generations run."""
    generation_tokens: int
    """Tokens the engine generated in the step, every eval."""
    evidence: dict[str, Any]
    """`vs_good` (verdicts' deltas vs the good end: diff, McNemar / Fisher p, flipped ids, new
    collapses), `sequential` (the deciding look's statistics), `looks` (every look), `excerpt`
    (one collapse the good end did not have, or None), `notes` (evals not run, and why)."""
    wall_s: float
    record: CellRecord


@dataclass
class _Pool:
    """One eval of a step: what it asks, in order, and what it answered so far."""

    ev: Eval
    settings: Any
    ids: list[str]
    column: int
    """Which count of a look (`batch_schedule`'s (questions, generations)) paces it."""
    parts: list[EvalResult] = field(default_factory=list)
    seconds: float = 0.0

    def combined(self) -> EvalResult | None:
        assert isinstance(self.ev, Subsets)  # `_pools` takes no other
        return self.ev.combine(self.parts) if self.parts else None


def seeded_order(ids: Sequence[str], seed: int, eval_name: str) -> list[str]:
    """The ids in the order every step asks them: sorted, then shuffled by (seed, eval)."""
    order = sorted(ids, key=question_order)
    random.Random(f"{seed}:{eval_name}").shuffle(order)
    return order


def sample_tokens(row: dict[str, Any]) -> int:
    """Tokens generated for one stored sample: the server's usage (GSM8K) or the detector's count
    of the generation (long generations)."""
    return int(row.get("completion_tokens") or (row.get("metrics") or {}).get("n_tokens") or 0)


def _pools(job: CellJob, good_dir: Path, ends: Ends, seed: int) -> tuple[list[_Pool], list[str]]:
    """The evals a step runs (with the ids the good end answered) and notes on those it does not."""
    assert ends.test is not None
    wanted: dict[str, int] = {}
    if ends.paired_metric and ends.test.paired is not None:
        wanted[ends.paired_metric] = 0
    if ends.count_metric and ends.test.collapses is not None:
        wanted[ends.count_metric] = 1
    pools: list[_Pool] = []
    notes: list[str] = []
    for ev, settings in job.config.evals.enabled():
        columns = [wanted[spec.name] for spec in ev.metrics_for(settings) if spec.name in wanted]
        if not isinstance(ev, Subsets):
            notes.append(f"{ev.name}: not run (cannot run a subset of its samples)")
            continue
        if not columns:
            notes.append(f"{ev.name}: not run (the ends do not differ on it)")
            continue
        path = good_dir / ev.samples_file
        ids = [row["id"] for row in read_jsonl(path)] if path.is_file() else []
        if not ids:
            raise ConfigError(f"{path}: the good end has no {ev.name} samples to pair a step with")
        pools.append(_Pool(ev, settings, seeded_order(ids, seed, ev.name), column=min(columns)))
    return pools, notes


class _StepBody:
    """The evals body of a step's cell (run_cell's `body`): batches until the test decides."""

    def __init__(self, pools: list[_Pool], ends: Ends, good_dir: Path, control: CellControl,
                 schedule: Sequence[tuple[int, int]], notes: list[str], evals: EvalSet) -> None:
        self.pools, self.ends, self.good_dir, self.control, self.evals = pools, ends, good_dir, control, evals
        self.schedule, self.notes = schedule, notes
        self.looks: list[dict[str, Any]] = []
        self.judgement: Judgement | None = None
        self.found: dict[str, Any] = {}
        """The evidence of the finished step (cell.json `step.evidence`)."""
        self.good_marks = self._marks_of(ends.paired_metric)

    def _spec(self, metric: str | None) -> MetricSpec | None:
        """The spec of a metric the step runs, as its eval's settings report it."""
        specs = [spec for pool in self.pools for spec in pool.ev.metrics_for(pool.settings)]
        return spec_named(metric, specs) if metric else None

    def _marks_of(self, metric: str | None) -> dict[str, bool]:
        spec = self._spec(metric)
        return marks(self.good_dir, spec, self.evals) if spec else {}

    def __call__(self, job: CellJob, server: Server) -> Iterator[CellPart]:
        assert self.ends.test is not None
        done = [0, 0]
        for look, counts in enumerate(self.schedule):
            for pool in self.pools:
                batch = pool.ids[done[pool.column]:counts[pool.column]]
                if batch:
                    yield self._run(pool, batch, job, server)
            done = list(counts)
            paired, collapses = self.paired(), self.collapses()
            self.judgement = self.ends.test.judge(paired, collapses, exhausted=look == len(self.schedule) - 1)
            self.looks.append({"questions": paired.n if paired else 0, "generations": collapses.n if collapses else 0,
                               "verdict": self.judgement.verdict, "statistics": self.judgement.statistics})
            job.update("step", f"look {look + 1}: {self.judgement.verdict}")
            if self.judgement.verdict != "undecided":
                break
        questions, generations, tokens = self.usage()
        self.found = self.evidence(job)
        yield Step({"verdict": self.judgement.verdict if self.judgement else None,
                    "reason": self.judgement.reason if self.judgement else "",
                    "questions": questions, "generations": generations, "generation_tokens": tokens,
                    "evidence": self.found})

    def _run(self, pool: _Pool, batch: list[str], job: CellJob, server: Server) -> EvalRun:
        """One batch of one eval; the samples file is rewritten and the metrics so far returned
        after it, so a step that fails later still shows what it answered."""
        if self.control.stop.is_set():
            raise Interrupted("step stopped")
        job.update(pool.ev.name, f"{len(batch)} more")
        t = time.monotonic()
        pool.parts.append(pool.ev.run(job.eval_context(server, pool.ev, only=tuple(batch)), pool.settings))
        pool.seconds += time.monotonic() - t
        combined = pool.combined()
        assert combined is not None
        write_jsonl(job.cell_dir / pool.ev.samples_file, combined.samples)
        return EvalRun(pool.ev.name, combined.metrics, round(pool.seconds, 3))

    def _pool(self, spec: MetricSpec | None) -> _Pool | None:
        """The pool of the eval that reports `spec`."""
        return next((p for p in self.pools if spec and p.ev.name == eval_name(spec.name)), None)

    def _rows(self, spec: MetricSpec) -> list[dict[str, Any]] | None:
        pool = self._pool(spec)
        return [row for part in pool.parts for row in part.samples] if pool and pool.parts else None

    def paired(self) -> PairedCounts | None:
        """The step vs the good end on the questions asked so far."""
        spec = self._spec(self.ends.paired_metric)
        if spec is None or spec.mark_field is None or (rows := self._rows(spec)) is None:
            return None
        field = spec.mark_field
        pairs = [(self.good_marks[row["id"]], bool(row[field])) for row in rows if row["id"] in self.good_marks]
        return PairedCounts(n=len(pairs), lost=sum(1 for g, s in pairs if g and not s),
                            gained=sum(1 for g, s in pairs if s and not g))

    def collapses(self) -> Count | None:
        """Events (collapses) in the generations run so far, through the eval's own flat metrics."""
        spec = self._spec(self.ends.count_metric)
        pool = self._pool(spec)
        combined = pool.combined() if pool else None
        if spec is None or pool is None or combined is None:
            return None
        flat = pool.ev.flat(combined.metrics)
        return Count(k=int(flat[spec.count_metric or ""]), n=int(flat[spec.n_metric or ""]))

    def metrics(self) -> dict[str, Any]:
        """Raw metrics per eval of everything asked so far: what cell.json `metrics` holds."""
        return {pool.ev.name: combined.metrics for pool in self.pools if (combined := pool.combined()) is not None}

    def evidence(self, job: CellJob) -> dict[str, Any]:
        """The step vs the good end as the matrix compares cells, and the sequential test's looks.
        The step's side is what a comparison reads of a cell record: its commit and its metrics."""
        good = read_json(self.good_dir / "cell.json")
        step: dict[str, Any] = {"source": {"sha": job.source.sha} if job.source else None, "metrics": self.metrics()}
        step["id"] = label(step, "step")
        vs_good = deltas_between(step, {**good, "id": label(good, "good end")}, job.cell_dir, self.good_dir,
                                 flat_metrics(step, self.evals), flat_metrics(good, self.evals), self.evals).dump()
        return {"vs_good": vs_good, "sequential": self.judgement.statistics if self.judgement else {},
                "looks": self.looks, "excerpt": self._excerpt(), "notes": self.notes}

    def _excerpt(self) -> dict[str, Any] | None:
        """One generation that collapsed here but not at the good end: its id, onset and excerpt."""
        spec = self._spec(self.ends.count_metric)
        if spec is None or spec.event_field is None or not (rows := self._rows(spec)):
            return None
        event = spec.event_field
        pool = self._pool(spec)
        good = {row["id"]: row for row in read_jsonl(self.good_dir / pool.ev.samples_file)} if pool else {}
        for row in rows:
            if row.get(event) and not (good.get(row["id"]) or {}).get(event):
                evidence = row.get("text_evidence") or row.get("evidence") or {}
                return {"id": row["id"], "onset": evidence.get("onset"),
                        "excerpt": evidence.get("excerpt") or str(row.get("text", ""))[:200]}
        return None

    def usage(self) -> tuple[int, int, int]:
        """(questions, generations, generation tokens) the step used."""
        per_column, tokens = [0, 0], 0
        for pool in self.pools:
            rows = [row for part in pool.parts for row in part.samples]
            per_column[pool.column] += len(rows)
            tokens += sum(sample_tokens(row) for row in rows)
        return per_column[0], per_column[1], tokens


def run_step(job: CellJob, control: CellControl, good_dir: Path, ends: Ends, *, seed: int,
             schedule: Sequence[tuple[int, int]] | None = None) -> StepOutcome:
    """Run one step (one engine start on `job.source`'s worktree) and judge it against the good end.

    `schedule`: cumulative (questions, generations) after each batch, the last the whole pool;
    default `sequential.batch_schedule` over what the good end answered. Raises `Interrupted`
    when `control.stop` ends it (nothing is written as finished), ConfigError when the ends
    cannot be tested against (`ends.test` None, a good end without samples); an engine that
    fails is the verdict `untestable`, never an exception."""
    if not ends.bad or ends.test is None:
        raise ConfigError(f"a step needs ends as claimed: {ends.reason}")
    pools, notes = _pools(job, good_dir, ends, seed)
    planned = [(pool.ev, pool.settings) for pool in pools]
    evalset.check(planned)
    evalset.prepare(planned, job.store.path)
    sizes = [sum(len(p.ids) for p in pools if p.column == column) for column in (0, 1)]
    body = _StepBody(pools, ends, good_dir, control, schedule or batch_schedule(*sizes), notes, job.config.evals.evalset)
    record = run_cell(job, control, body)
    if record.status == "interrupted":
        raise Interrupted("step interrupted")
    questions, generations, tokens = body.usage()
    wall = float(record.timings.get("total_s") or 0.0)
    if record.status != "ok" or body.judgement is None:
        reason = _untestable_reason(record)
        return StepOutcome("untestable", reason, questions, generations, tokens,
                           {"looks": body.looks, "notes": notes}, wall, record)
    verdict = body.judgement.verdict
    assert verdict != "undecided", "a finished step's last judgement is exhausted, so decided"
    return StepOutcome(verdict, body.judgement.reason, questions, generations, tokens, body.found, wall, record)


def _untestable_reason(record: CellRecord) -> str:
    """The cell's error in one line; for an engine that exited, with its log's last line (a
    commit that does not build says why there: "cannot import ...")."""
    error = record.error
    message = record.message or "the step decided nothing"
    if error is None or error.exit_code is None:
        return message
    tail = [line.strip() for line in (error.log_tail or "").splitlines() if line.strip()]
    return f"{message}: {tail[-1]}" if tail and tail[-1] not in message else message

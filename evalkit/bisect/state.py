"""bisect.json: one typed record of a bisect, rewritten whole after every end and every step.

`results/bisect-<id>/bisect.json` says what is being searched (config, cell, repo, range), what
each end and each step concluded, and where the search stands (`status`, `first_bad` or the
`untestable` range). It is written through `store.write_json` (temp file + rename) after each
step, so a SIGKILL at any moment leaves the previous whole file, and `--resume BISECT_ID` reuses
every finished step (its verdict is read back, its engine never started again). The per-commit
cell folders beside it (`good-<sha12>/`, `bad-<sha12>/`, `step-<sha12>/`) hold cell.json and the
samples exactly like a matrix run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from evalkit.bisect.commits import Commit
from evalkit.errors import ConfigError
from evalkit.store import check_run_id, write_json
from evalkit.store.records import Record, RecordFile

FILE_NAME = "bisect.json"
FOLDER_PREFIX = "bisect-"

BisectStatus = Literal["running", "found", "ends_not_as_claimed", "untestable", "interrupted"]
"""`running` while it searches; then `found` (exit 0), `ends_not_as_claimed` (exit 1),
`untestable` (only untestable commits left, exit 3) or `interrupted` (exit 130, resumable)."""
StepVerdict = Literal["good", "bad", "untestable"]


class CommitInfo(Record):
    sha: str
    """The full SHA."""
    subject: str
    author_date: str

    @classmethod
    def of(cls, commit: Commit) -> CommitInfo:
        return cls(sha=commit.sha, subject=commit.subject, author_date=commit.author_date)


class EndRecord(CommitInfo):
    """One end of the range, run as a full cell (or the good end taken from `--good-run`)."""

    cell_dir: str
    """Its cell folder: relative to the bisect folder when run here, absolute for `--good-run`."""
    status: str | None = None
    """The cell's status (`ok`, or `error` when the end did not run)."""
    message: str = ""
    """The cell's error, when it did not run."""
    wall_s: float | None = None


class StepRecord(CommitInfo):
    """One middle commit, tested by a step that stops as soon as its verdict is decided."""

    index: int
    """Position in the range, oldest first (the bad end is the last)."""
    verdict: StepVerdict
    reason: str
    """One line: why good, bad or untestable."""
    questions: int = 0
    """GSM8K questions the step used (of those the good end answered)."""
    generations: int = 0
    """Long generations the step used."""
    generation_tokens: int = 0
    evidence: dict[str, Any] = {}
    """Accuracy and collapse deltas vs the good end, p-values, the sequential test's statistics,
    one collapsed excerpt when there is one."""
    wall_s: float
    cell_dir: str
    """The step's cell folder, relative to the bisect folder."""


class BisectRecord(RecordFile):
    """bisect.json."""

    bisect_id: str
    status: BisectStatus
    config_path: str
    """The config file, absolute; `--resume` reads it again and refuses it if it changed."""
    config: dict[str, Any]
    """The config as parsed, secrets redacted (as run.json stores it)."""
    cell: str
    """The matrix cell bisected."""
    axis: str | None = None
    """The axis whose value's `source` gives the commits (None: `engine.source`)."""
    repo: str
    good_ref: str
    bad_ref: str
    first_parent: bool = True
    limit: int | None = None
    good_run: str | None = None
    """`--good-run`: the run whose cell folder is the good end (None: the good end ran here)."""
    seed: int = 0
    """Seeds the order in which steps ask questions (the same for every step)."""
    alpha: float
    """The false-alarm rate of each step's sequential test."""
    commits: list[CommitInfo]
    """The range, oldest first: every commit of good..bad, the bad end last."""
    good: EndRecord | None = None
    bad: EndRecord | None = None
    ends: dict[str, Any] | None = None
    """The bad end judged against the good end: {bad, flags, evidence}."""
    steps: list[StepRecord] = []
    """In the order they ran."""
    first_bad: str | None = None
    """The full SHA of the first bad commit, when found."""
    untestable: list[str] | None = None
    """When the range could not be split: the SHAs the first bad commit can be, oldest first."""
    message: str = ""
    """The conclusion in one line."""
    excerpt: dict[str, Any] | None = None
    """One long generation that collapsed at the first bad commit (or the bad end) but not at
    the good end: {sha, id, onset, text}."""
    engine_starts: int = 0
    """Engines started by this bisect (ends and steps, every resume included)."""
    command: list[str] = []
    started_at: str | None = None
    finished_at: str | None = None
    resumed_at: list[str] = []

    def write(self, folder: Path) -> None:
        write_json(folder / FILE_NAME, self.model_dump(mode="json", exclude_unset=False))

    def verdicts(self) -> dict[int, StepVerdict]:
        """The finished steps' verdicts by range index (what the search resumes from)."""
        return {s.index: s.verdict for s in self.steps}

    def commit(self, sha: str) -> CommitInfo:
        return next(c for c in self.commits if c.sha == sha)


def folder_of(results_dir: Path, ref: str) -> Path:
    """`--resume` ID -> the bisect folder: an id, a `bisect-<id>` folder name, or a path."""
    as_path = Path(ref)
    candidates = [as_path] if as_path.is_absolute() or len(as_path.parts) > 1 else [
        results_dir / f"{FOLDER_PREFIX}{check_run_id(ref.removeprefix(FOLDER_PREFIX))}", results_dir / ref]
    for candidate in candidates:
        if (candidate / FILE_NAME).is_file():
            return candidate
    raise ConfigError(f"--resume {ref}: not a bisect (no {FILE_NAME} in {candidates[0]})")


def load(folder: Path) -> BisectRecord:
    return BisectRecord.load(folder / FILE_NAME)

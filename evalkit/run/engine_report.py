"""A cell's side of what the engine reports: which tree it ran, its `/metrics` scraped around each
eval, and the throughput the client saw.

Which tree ran has up to three witnesses, in order of weight: where the engine's package imports
from (asked of its interpreter before it started, run/cell.py; the proof), the commit its
version names (gitinfo.py; an unbuilt vLLM says `dev`, SGLang the installed distribution's
version, so a version alone proves little), and the path of its own file in a start-up line of
its log (the running process's own word). `check_version` weighs them into `engine_check`.

The cell lifecycle calls `check_version` once the engine is ready and wraps each eval in an
`EngineScrapes`; each returns its piece of the cell's record (run/parts.py: `EngineVersion`,
`Scraped`), only ever warns in the progress, and neither can fail a cell. Which server is scraped is the profile's call (engine/metrics.py reads, profiles say where):
an engine evalkit started always, a server it did not start (`--base-url`) only when the profile
sets `scrape_external`, because a shared server's counters count other clients' requests too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx

from evalkit.engine.imports import inside, logged_file
from evalkit.engine.metrics import TIMEOUT_S, Scrape, figures, log_figures, read_version, scrape
from evalkit.engine.sources import ResolvedSource
from evalkit.evals.base import EvalResult
from evalkit.gitinfo import MISMATCH_WORDS, match_source
from evalkit.profiles import Profile
from evalkit.run.options import Progress
from evalkit.run.parts import EngineVersion, Scraped
from evalkit.store.records import EngineCheck, ImportInfo, Witness

Status = Literal["match", "mismatch", "unknown"]


def check_version(base_url: str, profile: Profile, source: ResolvedSource | None, imports: ImportInfo | None,
                  cell_id: str, progress: Progress, tree: Path | None = None, log_text: str = "",
                  plugin: bool = False) -> EngineVersion:
    """The engine's version and, for a source tree, whether the engine runs it, from every witness
    there is (`imports`: the proof asked before it started; `tree`: where its package must import
    from; `log_text`: this launch's engine log); a mismatch is also a `warning` line in the live
    progress, at once, not only in the report."""
    asked = profile.version_path is not None
    version, error = read_version(base_url, profile.version_path) if profile.version_path else (None, None)
    if source is None:
        check = EngineCheck(status="unknown", message=error or "no source tree to check against") if asked else None
        return EngineVersion(asked, version, check)
    witnesses = []
    if imports is not None and imports.inside is not None:
        witnesses.append(Witness(kind="import", status="match" if imports.inside else "mismatch",
                                 message=f"{imports.package} imports from {imports.origin}"))
    # A plugin's tree (`engine.plugin`, docs/real-answers.md) is witnessed by its import path alone:
    # the engine's version and the file its start-up line names are the installed engine's, rightly
    # outside the plugin's checkout.
    engine_tree = not plugin
    found = match_source(version, source.sha) if profile.version_path and engine_tree else None
    if found is not None:
        witnesses.append(Witness(kind="version", status=found.status,
                                 message=f"{found.message} ({error})" if error else found.message))
    if tree is not None and profile.startup_file_pattern and engine_tree:
        witnesses.append(_log_witness(logged_file(log_text, profile.startup_file_pattern), tree))
    if not witnesses:
        return EngineVersion(asked, version)
    status, message = weigh(witnesses, source.sha)
    if status == "mismatch":
        progress.update(cell_id, "warning", message)
    return EngineVersion(asked, version, EngineCheck(status=status, commit=found.commit if found else None,
                                                     source_sha=source.sha, message=message, witnesses=witnesses))


def _log_witness(path: str | None, tree: Path) -> Witness:
    if path is None:
        return Witness(kind="log", status="unknown", message="no start-up line naming the engine's own file")
    if inside(path, tree):
        return Witness(kind="log", status="match", message=f"the engine logged its file {path}")
    return Witness(kind="log", status="mismatch",
                   message=f"{MISMATCH_WORDS}: the engine logged its file {path}, outside its tree {tree}")


def weigh(witnesses: list[Witness], sha: str) -> tuple[Status, str]:
    """One verdict from the witnesses. The running engine's own logged file outside the tree is a
    mismatch whatever else says; otherwise an import path inside the tree proves it (a version that
    names no commit, or another one, is then only noted: an unbuilt or stale-built tree, not
    another tree); without an import proof the version decides, as it did alone before."""
    by = {w.kind: w for w in witnesses}
    log, imported, version = by.get("log"), by.get("import"), by.get("version")
    if log is not None and log.status == "mismatch":
        return "mismatch", log.message
    if imported is not None and imported.status == "match":
        notes = [w.message for w in (log, version) if w is not None and w.status != "mismatch"]
        if version is not None and version.status == "mismatch":  # the tree runs: its version is stale
            notes.append(version.message.removeprefix(f"{MISMATCH_WORDS}: ") + ", a build of another commit?")
        return "match", "; ".join([f"the engine runs {sha[:12]}: {imported.message}", *notes])
    if version is not None and version.status != "unknown":
        return version.status, version.message
    if log is not None and log.status == "match":
        return "match", f"the engine runs {sha[:12]}: {log.message}"
    return "unknown", "; ".join(w.message for w in witnesses)


class LogWindow:
    """The engine log's lines written since the last look: one eval's window of the log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = path.stat().st_size if path.exists() else 0

    def next(self) -> str:
        """The complete lines written since the last call (or since the window opened)."""
        if not self.path.exists():
            return ""
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        return data[:end].decode("utf-8", errors="replace")


class EngineScrapes:
    """`/metrics` before the first eval and after each one: eval k's figures are scrape k+1 minus
    scrape k (nothing runs between two evals, so one scrape ends one eval and starts the next).
    For a profile that logs its speculative decoding counts instead (`spec_log`: ATOM), the engine
    log's lines of the same window are read the same way. A context manager: its one HTTP client
    is closed at the end."""

    def __init__(self, base_url: str, profile: Profile, external: bool, metrics_path: str | None = None,
                 log_path: Path | None = None) -> None:
        self.base_url = base_url
        self.spec_log = profile.spec_log
        self.log = LogWindow(log_path) if log_path is not None and profile.spec_log is not None and not external else None
        """The log of an engine evalkit started (a server it did not start has no log here)."""
        self.names = profile.metric_names
        self.path = metrics_path or profile.metrics_path
        self.skipped: str | None = None
        """Why this server is not scraped, recorded as each eval's `missing`."""
        if self.path is None or self.names is None:
            self.skipped = f"profile {profile.name} names no metrics endpoint"
        elif external and not profile.scrape_external:
            self.skipped = (f"external server: not scraped (its counters count other clients' requests too; "
                            f"profile {profile.name} does not set scrape_external)")
        self._last: Scrape | None = None
        self._client = httpx.Client(timeout=TIMEOUT_S) if self.skipped is None else None

    def __enter__(self) -> EngineScrapes:
        """Scrape before the first eval."""
        if self._client is not None:
            assert self.path is not None
            self._last = scrape(self._client, self.base_url, self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()

    def after(self, eval_name: str, result: EvalResult, wall_s: float) -> Scraped:
        """After one eval: its engine figures and its throughput. The throughput's
        time is the eval's request phase where it measured one (`requests_s`: first request to last
        answer; lm-eval's one-time import and task loading otherwise make a run's first cell look
        several times slower), else the eval's wall time."""
        if self._client is None or self._last is None:
            found: dict[str, Any] = {"missing": self.skipped}
        else:
            assert self.path is not None and self.names is not None
            now = scrape(self._client, self.base_url, self.path)
            found = figures(self._last, now, self.names, self.path)
            self._last = now
        if self.log is not None and self.spec_log is not None:
            counts = self.spec_log(self.log.next())
            if counts is not None:
                kept = {"metrics_missing": found["missing"]} if "missing" in found else found
                found = kept | log_figures(counts)
            elif "missing" in found:
                found["missing"] += "; its log counted no speculative decoding in this eval's window"
        requests_s = result.metrics.get("requests_s")
        seconds, timed = (requests_s, "requests") if requests_s else (wall_s, "eval")
        speed = throughput(result.samples, seconds, found.get("generation_tokens")) | {"timed": timed}
        return Scraped(eval_name, found, speed)


def client_tokens(samples: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
    """Output tokens the client received, and how it knows: every answer's `usage` (GSM8K through
    lm-eval, recorded per prompt), or the token ids of every stream (the collapse check with a
    profile that returns them). Split text counts words, not tokens: then None."""
    if not samples:
        return None
    if all(row.get("completion_tokens") is not None for row in samples):
        return sum(int(row["completion_tokens"]) for row in samples), "usage"
    if all(row.get("token_source") == "token_ids" and (row.get("metrics") or {}).get("n_tokens") is not None
           for row in samples):
        return sum(int(row["metrics"]["n_tokens"]) for row in samples), "stream token ids"
    return None


def throughput(samples: Sequence[Mapping[str, Any]], wall_s: float, engine_tokens: int | None) -> dict[str, Any]:
    """Output tokens per second of one eval's wall time: the client's count where it has one, else
    the engine's generation-tokens delta (said in `tokens_from`); None when neither is known."""
    counted = client_tokens(samples)
    if counted is None and engine_tokens is not None:
        counted = (engine_tokens, "engine counter")
    if counted is None or wall_s <= 0:
        return {"completion_tokens": None, "wall_s": wall_s, "tokens_per_s": None, "tokens_from": None}
    tokens, source = counted
    return {"completion_tokens": tokens, "wall_s": wall_s, "tokens_per_s": tokens / wall_s, "tokens_from": source}

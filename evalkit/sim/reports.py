"""What the simulated engine reports about itself: `/version` and Prometheus `/metrics`, as vLLM does.

The counters are real counts of what this server generated (every token it sent, every request
it finished), under vLLM 0.32's names (see evalkit/profiles/vllm.py), so a test can check that
the deltas evalkit scrapes around an eval equal the completion tokens that eval received.
prometheus_client renders them, as it does in vLLM.

Speculative decoding (``--sim-spec-decode K``, or ATOM's ``--num-speculative-tokens K``) is bookkeeping, not a draft model: a generation of
n tokens takes its first token from prefill and the other m = n - 1 from decode steps that each
emit their accepted draft tokens plus one; with acceptance p, ``accepted = floor(m * Kp / (1 + Kp))``
of them were accepted drafts and ``m - accepted`` steps ran, each proposing K drafts. So
accepted / draft tokens is close to p and exact integers add up to n.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from evalkit.sim.config import Reports
from evalkit.sim.mtp import MtpLog

TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""vLLM's inter-token latency buckets, shortened."""


class EngineMetrics:
    """One server's Prometheus registry: tokens, finished requests, TPOT and spec decoding counters."""

    def __init__(self, model_name: str, reports: Reports, mtp: MtpLog | None = None) -> None:
        self.reports = reports
        self.mtp = mtp
        """ATOM's dialect: the same generations' steps, logged as ATOM's scheduler logs them (sim/mtp.py)."""
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model_name, "engine": "0"}
        names = list(labels)
        self._tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", names,
                               registry=self.registry).labels(**labels)
        self._success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                [*names, "finished_reason"], registry=self.registry)
        self._labels = labels
        self._tpot = Histogram("vllm:request_time_per_output_token_seconds",
                               "Histogram of time_per_output_token_seconds per request.", names,
                               buckets=TPOT_BUCKETS, registry=self.registry).labels(**labels)
        self._spec: tuple[Counter, ...] | None = None  # drafts, draft tokens, accepted
        if reports.spec_tokens > 0:
            self._spec = tuple(
                Counter(name, doc, names, registry=self.registry).labels(**labels)
                for name, doc in (("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                                  ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                                  ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")))

    def generated(self, tokens: int) -> None:
        """Tokens just produced (sent or about to be): counted as they are made, like an engine does."""
        self._tokens.inc(tokens)

    def finished(self, tokens: int, finish_reason: str | None, seconds_per_token: float | None) -> None:
        """A generation of `tokens` tokens ended with `finish_reason` (None: aborted, not a success)."""
        if finish_reason is None:
            return
        if self.mtp is not None:
            self.mtp.generation(tokens)
        self._success.labels(**self._labels, finished_reason=finish_reason).inc()
        if seconds_per_token is not None and tokens > 1:
            self._tpot.observe(seconds_per_token)
        if self._spec is not None and tokens > 1:
            drafts, draft_tokens, accepted = self._spec
            k, decoded = self.reports.spec_tokens, tokens - 1
            kp = k * self.reports.spec_acceptance
            took = int(decoded * kp / (1 + kp))
            steps = decoded - took
            drafts.inc(steps)
            draft_tokens.inc(steps * k)
            accepted.inc(took)

    def text(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

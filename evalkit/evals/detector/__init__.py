"""Collapse detector: token ids (or text) in, verdict and evidence out.

The bug behind evalkit (ATOM PR #1596) turned long generations into repeated-token garbage
while short answers still looked fine, so accuracy alone hides it. This package decides, per
generated sample, whether it collapsed, and says into what (the evidence's ``categories``):

* **loop**: repeated tokens, below: where the loop starts and what it repeats;
* **stutter**: words written twice or three times in place, "The capital capital of of France
  France", or glued to their copy, "thethe cat satsat";
* **soup**: U+FFFD or control characters, letters of two alphabets written against each other
  ("373ьallis"), or real words in random order (word salad): fluent-looking garbage in which
  nothing repeats.

Stutter and soup read the text (``_garble`` says what they count and what they leave alone:
numbers, layouts, Chinese, Japanese, Russian, mixed-script technical text, Greek symbols); the
loop rules read token ids or the text's pieces. It is pure analysis: the caller streams from
the server and feeds it.

What is measured, in one numpy pass (no per-token Python objects):

* **Runs merged**: first, every run of one unit of at most ``run_unit`` tokens repeated at
  least ``run_copies`` times (``0 0 0 0``, ``0, 0, 0``, ``0x00, 0x00``) becomes one symbol
  that holds the unit and the run's length (``_symbols``). The zeros of a sparse matrix row
  or a hex dump are then one cell, and rows that differ in where their cells start and end
  (the 1 of an identity matrix moves one column per row) do not recur, while a loop repeats
  the same symbols, runs and line breaks included. For text without such runs, symbols are
  tokens. The tail rules below read symbols and count their thresholds in symbols.
* **Periodic tail**: for every period p <= ``max_period``, how many symbols at the end have
  period p. That is the Z-function of the reversed sequence (the KMP prefix function gives the
  same by suffix length); it is computed by direct comparison of a few symbols and a hashed
  binary search for the survivors, then the reported period is verified symbol by symbol. The
  unit repeating ``min_repeats`` times over the longest tail is reported.
* **Near-periodic tail**, for loops whose copies differ in a token or two (a counter in a
  repeated paragraph): the longest tail that matches itself one period back in at least
  ``min_match_rate`` of places, for the periods at which n-grams recur most in the tail.
* **Recurrence CUSUM**, for loops with no fixed period (words that drift, clauses in varying
  order): each n-gram (n = 5) is flagged when it occurred within the last
  ``recurrence_lookback`` symbols, and a one-sided CUSUM with reference rate 0.85 runs over
  the flags, as vLLM's proposed thinking-loop breaker (#52673) does over 6-grams. Healthy text,
  tables and code bring new values every few tokens and keep it at zero; a loop drives it up
  steadily. The excursion open at the end is the recurrent tail, the highest one the span.
* **Longest run** of one short unit, in tokens: a loop of a unit that short ("0 0 0 ...",
  "yes, yes, ...") is a single growing run, which only its length can judge.
* Descriptive metrics for comparing a cell with its baseline cell: seq-rep-4, distinct-1/2,
  zlib compression ratio, recurring n-gram rate. They are not verdict rules: they grow with
  length and flag tables, logs and JSON as readily as loops.

Verdict: collapsed when any rule holds (each rule is a conjunction of conditions). The loop
rules:

* A cut generation (finish_reason "length", "aborted", or unknown): a periodic tail whose unit
  repeats ``min_repeats`` times and copies ``min_loop_tokens`` symbols; a near-periodic tail
  likewise with ``min_near_loop_tokens``; or a recurrent tail of ``min_recurrent_tokens``.
* A natural end ("stop"): the same tail rules with ``natural_end_factor`` times the symbols,
  because a loop the model left by itself is weaker evidence.
* Whatever the finish reason: a recurrent span of ``min_recurrent_span_tokens`` or a run of
  ``max_run`` tokens of one short unit anywhere (the model may have escaped the loop, the text
  is still garbage).

And, when the text is known (pieces given, or :func:`analyze_text`), whatever the finish
reason: a stutter, a CUSUM over "this word is in a unit written two or three times in a row,
or glued to its copy" reaching ``min_stutter_tokens``; or a soup, ``min_invalid_chars``
invalid characters, ``min_script_switches`` script switches within ``script_window`` tokens,
a run of ``min_salad_words`` bare words, or ``min_salad_breaks`` sentence ends before a
lowercase word within ``salad_window`` tokens.

No rule asks for a fraction of the text: a loop at the end of a long healthy answer (onset at
90%) is as real as an early one, and absolute counts keep every rule monotone as a loop goes
on, which early abort relies on (see :class:`StreamingDetector`).

Known look-alikes, flagged although they may be what the user asked for, because no token
statistic tells them from a loop before they end:

* a row holding more than ``max_run`` (96) tokens of one short unit with no row ended before
  it: the first row of a 100-column identity matrix, or of a 40-column one with a tokenizer
  that makes ``, 0`` three tokens (cl100k and Llama 3 give the space before a number a token
  of its own): raise max_run for such servers;
* identical rows, the same unit with its line break: an empty table or a zero block of 30+
  rows, a C array of zero padding, five rows of ones printed as ``[1.0, 1.0, ...]``, cut at
  max_tokens or aborted while streaming;
* rows drawn from a handful of patterns in random order (a bare one-hot matrix of many rows),
  which recur exactly as a loop over a few sentences in random order does;
* code whose blocks differ only in one identifier (20 handlers ``except Exception: pass``)
  cut at max_tokens or aborted while streaming.

Repetition a user asked for ("ha" 2,000 times, a grid of zeros, the same SQL query for six
statuses) is the same look-alike: the loop rules may flag it, stutter and soup never do
(tests/data/detector/requested.jsonl).

Counting, counting songs, tables, CSV, JSON arrays, logs, refrains, templated reports, sparse
and identity matrices, grids, bitmaps and hex dumps stay healthy (tests/data/detector has 665
such texts), and so do two near-identical SQL blocks, prime lists, counting to 300,
thinking-model traces, prose in Chinese, Russian, Japanese and Korean, mixed-script technical
text, URLs, paths and hashes, and words legitimately written twice (320 more). Greedy decoding
of healthy models loops now and then too: judge a cell against its baseline cell.
"""

from ._analysis import analyze, analyze_text, is_collapsed, is_text_collapsed
from ._results import NATURAL_FINISH_REASONS, Analysis, Evidence, Metrics, Verdict
from ._settings import DEFAULT_SETTINGS, DetectorSettings
from ._streaming import StreamingDetector
from ._text import split_text

__all__ = [
    "DEFAULT_SETTINGS",
    "NATURAL_FINISH_REASONS",
    "Analysis",
    "DetectorSettings",
    "Evidence",
    "Metrics",
    "StreamingDetector",
    "Verdict",
    "analyze",
    "analyze_text",
    "is_collapsed",
    "is_text_collapsed",
    "split_text",
]

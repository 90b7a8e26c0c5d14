"""Every threshold the collapse verdict uses, in one frozen model with documented defaults.

The defaults were set on the suites in ``tests/data/detector`` (see ``make_suites.py``): they
catch 439 of the 440 collapsed texts there and flag none of the 665 hard negatives (210 of
them matrices, grids, bitmaps, hex dumps and CSV full of zeros), whose most loop-like prefix
reaches about half of any threshold; and they catch all 440 as ids of a 32k-vocabulary BPE
tokenizer (``check_tokenizers.py``), where only rows wider than max_run tokens are flagged.
The stutter and soup thresholds were set on garbled_{positives,negatives}.jsonl (``garbled.py``):
no hard negative reaches a quarter of them. A
different engine or tokenizer may want other values, so every one of them is a field here; an
evaluation records the settings it used next to its results.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DetectorSettings(BaseModel):
    """Thresholds of the verdict rules and the bounds that keep the analysis cheap.

    Token counts are counts of the sequence the detector is given: real token ids from the
    server, or the pieces of :func:`split_text` (about one piece per word or punctuation run).
    The tail and recurrence rules count symbols, where a run of a short unit is one symbol
    (see run_unit); for text without such runs, symbols are tokens.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_period: int = Field(
        default=512,
        ge=1,
        description=(
            "Longest repeated unit, in tokens, that the periodic rules look for. 512 covers a "
            "whole paragraph repeating; a longer unit (a page) goes unseen unless this, "
            "recurrence_lookback and tail_window are raised together."
        ),
    )
    min_repeats: float = Field(
        default=3.0,
        ge=2.0,
        description=(
            "A unit must occur this many times in a row before the tail counts as periodic. "
            "Three keeps a song's doubled chorus or two identical code blocks healthy; it must "
            "stay >= 2 for the early-abort guarantee (see StreamingDetector)."
        ),
    )
    min_loop_tokens: int = Field(
        default=96,
        ge=1,
        description=(
            "Tokens that copy an earlier part of the loop (the periodic tail minus its first "
            "unit) needed to call an exactly periodic tail a collapse. Healthy text "
            "rarely repeats itself verbatim for ~100 tokens; real loops run for thousands."
        ),
    )
    min_match_rate: float = Field(
        default=0.94,
        gt=0.5,
        le=1.0,
        description=(
            "Near-periodic tail: fraction of tokens equal to the token one period earlier. 0.94 "
            "admits a paragraph of 20+ tokens whose counter changes in every copy, and rejects "
            "counting sequences (<= 80%) and rows of a table or JSON array that differ in a "
            "few fields (85-92%)."
        ),
    )
    min_near_loop_tokens: int = Field(
        default=192,
        ge=1,
        description=(
            "Like min_loop_tokens, for a near-periodic tail. Copies that differ are weaker "
            "evidence than identical ones: a table can hold a few nearly identical rows in a "
            "row, so the near-periodic stretch must be twice as long."
        ),
    )
    near_period_candidates: int = Field(
        default=4,
        ge=1,
        description=(
            "How many candidate periods (the most frequent distances between recurring "
            "n-grams in the tail window) the near-periodic rule tries."
        ),
    )
    recurrence_ngram: int = Field(
        default=5,
        ge=1,
        description=(
            "n of the n-grams whose recurrence the CUSUM watches. Five tokens rarely recur in "
            "healthy prose, while a loop with no fixed period (words that drift, clauses in "
            "varying order) still recurs almost everywhere. Shorter n-grams start to recur in "
            "tables; longer ones make drifting loops look new at every junction."
        ),
    )
    recurrence_lookback: int = Field(
        default=512,
        ge=1,
        description=(
            "An n-gram counts as recurring when it occurred within this many tokens before. "
            "A bounded look-back keeps the signal stationary over long texts (a long document "
            "reuses phrases from far away) and lets streaming compute it exactly."
        ),
    )
    recurrence_rate: float = Field(
        default=0.85,
        gt=0.0,
        lt=1.0,
        description=(
            "Reference value k of the CUSUM over 'this n-gram recurred': each recurring "
            "n-gram adds 1-k, each new one subtracts k, so the sum only grows while more than "
            "this fraction of n-grams recur. A loop whose clauses come in varying order still "
            "recurs at 88-97% (only the junctions are new); templated healthy text (tables, "
            "logs, code, JSON) stays at or below ~82% because every row brings new values, "
            "also with real BPE tokenizers that split rows into more constant tokens."
        ),
    )
    min_recurrent_tokens: int = Field(
        default=160,
        ge=1,
        description=(
            "CUSUM alarm level at the end of a cut generation, in tokens of a fully recurring "
            "stretch (a stretch recurring at rate r needs (1-k)/(r-k) times more tokens). A "
            "song's last chorus sung twice reaches ~100."
        ),
    )
    min_recurrent_span_tokens: int = Field(
        default=512,
        ge=1,
        description=(
            "CUSUM alarm level anywhere in the text, whatever the finish reason: a stretch "
            "this long that makes no progress is a collapse even if the model escaped it "
            "later or stopped by itself."
        ),
    )
    max_run: int = Field(
        default=96,
        ge=2,
        description=(
            "A run of one unit of at most run_unit tokens (a token, '0, ', '0.0, ') this long "
            "anywhere is a collapse. Tokenizers merge long runs of spaces, dashes and newlines, "
            "so healthy prose stays far below. A row of a matrix, a bitmap or a CSV file holds "
            "a run as long as the row, so this is also the widest such row that stays healthy "
            "when no row ends before it (the first row of a 96-column identity matrix): a "
            "larger value keeps wider rows healthy and aborts a one-token loop later."
        ),
    )
    run_unit: int = Field(
        default=6,
        ge=1,
        description=(
            "Runs of a unit of at most this many tokens are merged into one symbol (the unit "
            "and the run's length) before the periodic, near-periodic and recurrence rules "
            "read the text, and their token counts are counted in such symbols: the zeros of a "
            "sparse matrix row or a hex dump are one cell, so rows that differ in where their "
            "cells start and end do not recur. 4 covers '0.0, ' and '0x00, '; a loop of a "
            "unit this short is one growing run, judged by max_run."
        ),
    )
    run_copies: int = Field(
        default=3,
        ge=2,
        description=(
            "A unit must occur this many times in a row to start a run. Three keeps a phrase "
            "said twice ('over the hill, over the hill') as words, which a drifting loop's "
            "recurrence needs; a streaming check waits run_unit * run_copies tokens before a "
            "token's symbol is final."
        ),
    )
    natural_end_factor: float = Field(
        default=4.0,
        ge=1.0,
        description=(
            "When the model ended the text itself (finish_reason 'stop' and the like), the "
            "tail rules need this many times more loop tokens: a loop the model left by "
            "itself is weaker evidence than one still running when max_tokens cut it."
        ),
    )
    tail_window: int = Field(
        default=1536,
        ge=16,
        description=(
            "Symbols at the end of the text the streaming check looks at (with "
            "recurrence_lookback more before them), and where near-periodic candidates are "
            "taken from. Must hold min_repeats units of max_period."
        ),
    )
    check_every: int = Field(
        default=64,
        ge=1,
        description=(
            "StreamingDetector re-checks the tail once this many more tokens have arrived "
            "since the last check; a collapse is aborted at most this many tokens (or one "
            "chunk, if chunks are longer) after the abort rule first holds."
        ),
    )
    abort_margin: float = Field(
        default=1.0,
        ge=1.0,
        description=(
            "Early abort needs every token threshold (min_loop_tokens, min_near_loop_tokens, "
            "min_recurrent_tokens, min_recurrent_span_tokens, max_run) times this factor. 1.0 "
            "aborts as soon as the verdict for a cut generation is certain; larger values "
            "trade saved tokens for a wider margin against healthy text that repeats itself "
            "for a while and then moves on (templated code, long empty tables)."
        ),
    )
    stutter_unit: int = Field(
        default=8,
        ge=1,
        description=(
            "Stutter: the longest unit, in tokens, whose exact doubling in place counts "
            "('capital capital', 'from %s from %s', a phrase of up to eight pieces written "
            "twice; 4 before issue 48, raised on the corpus's tuning half, where phrases of "
            "two to four words were missed). Longer doubled stretches are loops' business, "
            "except whole lines (up to 48 pieces, written two or three times)."
        ),
    )
    stutter_copies: int = Field(
        default=3,
        ge=2,
        description=(
            "Stutter: the most copies of a unit written in place that count ('the the', "
            "'the the the'). More copies in a row are a run, judged by max_run: 'ha' written "
            "2,000 times, a row of zeros."
        ),
    )
    stutter_rate: float = Field(
        default=0.3,
        gt=0.0,
        lt=1.0,
        description=(
            "Reference k of the CUSUM over 'this token is part of a unit, holding a word, "
            "written exactly twice in a row': the sum only grows while more than this fraction "
            "of tokens is doubled. Every word doubled is ~90% of tokens, a quarter of the words "
            "~35%; healthy text, legitimately doubled words ('had had', 'Bora Bora', 看看) and "
            "layouts stay far below over any stretch (at most ~11 tokens' worth on the suites)."
        ),
    )
    min_stutter_tokens: int = Field(
        default=48,
        ge=1,
        description=(
            "Stutter alarm level anywhere in the text, in tokens of a fully doubled stretch (a "
            "stretch doubled at rate r needs (1-k)/(r-k) times more tokens): ~55 tokens of "
            "every word doubled, ~110 at half of them; 4x the most any hard negative reaches."
        ),
    )
    min_stutter_lines: int = Field(
        default=6,
        ge=1,
        description=(
            "Stutter: lines (of at most 48 pieces, holding two words) each written two or three "
            "times in a row, this many within stutter_line_window tokens. A reasoning trace "
            "re-reads one line now and then (the suites' thinking traces: one each), a list "
            "of translated UI strings holds a few equal ones (four on the tuning half)."
        ),
    )
    stutter_line_window: int = Field(
        default=512,
        ge=1,
        description="Tokens within which min_stutter_lines doubled lines must start.",
    )
    min_invalid_chars: int = Field(
        default=1,
        ge=1,
        description=(
            "Soup: U+FFFD replacement characters, C0/C1 control characters (other than tab and "
            "line breaks) and lone surrogates anywhere (a U+FFFD ending a cut text excepted) "
            "that make a sample garbled. A healthy detokenizer never emits them; one is what "
            "the tt-metal #40960 report shows."
        ),
    )
    min_script_switches: int = Field(
        default=3,
        ge=1,
        description=(
            "Soup: letters of two alphabets written against each other with nothing between "
            "('373ьallis') this many times within script_window tokens. Pairs healthy text "
            "writes that way (Han or kana with Latin, Greek with anything) never count."
        ),
    )
    script_window: int = Field(
        default=64,
        ge=1,
        description="Tokens within which min_script_switches switches must fall.",
    )
    min_salad_words: int = Field(
        default=48,
        ge=1,
        description=(
            "Soup: a run of this many words, each after one space, with no punctuation, digit, "
            "line break or word repeated in between, is word salad (real words in random "
            "order, written bare). Healthy text on the suites reaches 32; a list of words "
            "asked for with spaces only is the look-alike."
        ),
    )
    min_salad_breaks: int = Field(
        default=3,
        ge=1,
        description=(
            "Soup: this many sentence ends after a word of four letters or more, followed by "
            "a lowercase word ('two words. the'), within salad_window tokens is word salad "
            "(real words shuffled with their punctuation). Healthy text on the suites reaches 1."
        ),
    )
    salad_window: int = Field(
        default=256,
        ge=1,
        description="Tokens within which min_salad_breaks breaks must fall.",
    )
    soup_block: int = Field(
        default=512,
        ge=16,
        description=(
            "Soup: pieces of each block (one starts every half block) whose order is compared "
            "with a shuffle of the same pieces (unordered_pieces). Shorter blocks are noisier; "
            "soup shorter than a block is left to the other soup rules."
        ),
    )
    soup_pair_order: float = Field(
        default=1.4,
        gt=0.0,
        description=(
            "Soup: a block is unordered only when |ln((O + 1) / (O' + 1))| is below this, O "
            "the pairs of positions starting the same three pieces, O' the same in the block "
            "shuffled. Set on the tuning half of the corpus (tests/data/detector/corpus.py)."
        ),
    )
    soup_class_order: float = Field(
        default=0.2,
        gt=0.0,
        description=(
            "Soup: and only when the mutual information of adjacent piece classes (line break, "
            "space, digits, word, punctuation...) exceeds the shuffled block's by less than "
            "this many nats. Set on the tuning half of the corpus."
        ),
    )
    soup_min_words: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description=(
            "Soup: a block is judged for order only when at least this share of its pieces "
            "are words (counting, matrices and bitmaps are not)."
        ),
    )
    min_unordered_blocks: int = Field(
        default=1,
        ge=1,
        description="Soup: unordered blocks anywhere that make a sample token soup.",
    )
    min_unit_copies: int = Field(
        default=10,
        ge=3,
        description=(
            "Loop: a unit of at least three tokens holding a word, written this many times in "
            "a row (a sentence repeated; 'repeated_unit'), whatever the text's length. Shorter "
            "units are runs ('ha ha ha', max_run's); units without a word are layout (a row of "
            "'0x00, '). Needs the text."
        ),
    )
    min_judged_tokens: int = Field(
        default=64,
        ge=1,
        description=(
            "A healthy text shorter than this is reported too short to judge: the stutter and "
            "word-salad rules need ~50 tokens of it, a loop 96 copied tokens."
        ),
    )
    seq_rep_n: int = Field(
        default=4,
        ge=1,
        description="n of the reported seq-rep-n metric (Welleck et al. 2019 use 4).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DetectorSettings:
        if self.max_period > self.recurrence_lookback:
            raise ValueError("max_period must not exceed recurrence_lookback")
        if self.tail_window < self.min_repeats * self.max_period:
            raise ValueError("tail_window must hold min_repeats * max_period tokens")
        return self


DEFAULT_SETTINGS = DetectorSettings()

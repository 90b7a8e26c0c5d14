"""Generate the suites of the detector's stutter and soup signals, and the requested repetition.

    python3 tests/data/detector/garbled.py [--check]

Writes three files next to it, a pure function of make_suites.SEED, this file,
material_i18n.py, make_suites.py's helpers and the detector's split_text (it counts tokens):

* garbled_positives.jsonl: a healthy prefix, then stutter (words written twice in place, "The
  capital capital of of France France") at several densities, in English, Russian and Chinese;
  or token soup: fragments of a multilingual vocabulary in random order, interleaved with
  healthy words at several densities, with a multilingual vocabulary (Qwen/DeepSeek-like, many
  CJK and Cyrillic pieces) or a Latin-heavy one; or healthy text whose characters were
  replaced by U+FFFD or control characters here and there. Each has ``loop_start``, the
  character offset where the garbling begins. Categories whose recall the detector claims:
  stutter, soup_multiscript, soup_replacement; measured but not claimed (the honest limits):
  stutter_sparse (a quarter to a half of the words doubled) and soup_latin.
* garbled_negatives.jsonl: the false-positive shapes other detectors hit (issue 30): near-
  identical SQL blocks, long prime lists, counting to 300, thinking-model traces ("Wait, let me
  re-check..."), Chinese, Russian, Japanese and Korean prose, mixed-script technical text
  ("使用PyTorch的tensor", "PyTorchのtensorを", μm and ΔT), URLs, paths and hashes, and words
  that are legitimately written twice ("had had", "Bora Bora", 看看).
* requested.jsonl: repetition a user asked for: "ha" 2,000 times, grids of zeros, and the same
  SQL query for three to six statuses (only the filter changes). The loop rules flag some of
  them (no token statistic tells them from a collapse without the prompt: the package
  docstring lists them as known look-alikes); stutter and soup must not.

Markdown tables, code and the other look-alikes are in negatives.jsonl already.
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_suites as S  # puts the repository on sys.path too
import material as M
import material_i18n as I

from evalkit.evals.detector._text import split_pieces

N_PER_CATEGORY = 40
Blocks = Iterator[str]


# ---------------------------------------------------------------------------------------------
# templated sentences in other languages (unbounded material, numbers and names vary)


def zh_sentence(rng: random.Random) -> str:
    a, b = rng.randint(2, 90), rng.randint(2, 40)
    name = rng.choice(["小明", "小红", "王老师", "李华", "张伟", "刘洋", "陈静"])
    return rng.choice([
        f"{name}有{a}个苹果，给了朋友{b}个，还剩下{max(a - b, 0)}个。",
        f"一本书原价{a}元，打折以后便宜了{b}元。",
        f"{name}每天走{a}分钟的路去上班，一周一共走{a * 5}分钟。",
        f"这个班有{a}名学生，其中{b}名参加了数学比赛。",
        f"我们在第{b}天完成了{a}%的工作。",
        rng.choice(I.CHINESE),
    ])


def ru_sentence(rng: random.Random) -> str:
    a, b = rng.randint(2, 90), rng.randint(2, 40)
    name = rng.choice(["Аня", "Борис", "Вера", "Дмитрий", "Елена", "Иван", "Ольга"])
    return rng.choice([
        f"У {name} было {a} яблок, и {b} из них отдали друзьям.",
        f"Книга стоила {a} рублей, а со скидкой стала дешевле на {b}.",
        f"{name} каждый день идёт на работу {a} минут.",
        f"В классе {a} учеников, и {b} из них участвовали в олимпиаде.",
        f"На {b}-й день мы выполнили {a}% работы.",
        rng.choice(I.RUSSIAN),
    ])


def ja_sentence(rng: random.Random) -> str:
    a, b = rng.randint(2, 90), rng.randint(2, 40)
    name = rng.choice(["太郎", "花子", "田中さん", "佐藤さん", "鈴木先生"])
    return rng.choice([
        f"{name}はりんごを{a}個持っていて、友だちに{b}個あげました。",
        f"この本の定価は{a}00円で、割引で{b}0円安くなりました。",
        f"{name}は毎日{a}分歩いて会社に行きます。",
        f"クラスには{a}人の生徒がいて、そのうち{b}人が大会に参加しました。",
        rng.choice(I.JAPANESE),
    ])


def ko_sentence(rng: random.Random) -> str:
    a, b = rng.randint(2, 90), rng.randint(2, 40)
    return rng.choice([f"사과가 {a}개 있었는데 친구에게 {b}개를 주었습니다.", f"책의 가격은 {a}000원입니다.",
                       f"매일 {a}분 동안 걸어서 회사에 갑니다.", rng.choice(I.KOREAN)])


LANGUAGES: dict[str, Callable[[random.Random], str]] = {"zh": zh_sentence, "ru": ru_sentence, "ja": ja_sentence, "ko": ko_sentence}
SEPARATOR = {"zh": "", "ja": "", "ru": " ", "ko": " ", "en": " "}


def en_sentence_pool(rng: random.Random) -> Iterator[str]:
    return S.GSM.sentence_pool(rng)


# ---------------------------------------------------------------------------------------------
# hard negatives


def sql_query(rng: random.Random) -> str:
    """A reporting query whose status filter and limit are ``{status}`` and ``{limit}``."""
    table, other = rng.sample(I.SQL_TABLES, 2)
    cols = rng.sample(I.SQL_COLUMNS, 4)
    return (f"SELECT {cols[0]}, {cols[1]}, SUM({cols[2]}) AS total_{cols[2]}\nFROM {table} t\n"
            f"JOIN {other} o ON o.id = t.{other[:-1]}_id\nWHERE t.created_at >= NOW() - INTERVAL '{rng.choice([7, 30, 90])} days'\n"
            f"  AND t.status = '{{status}}'\nGROUP BY {cols[0]}, {cols[1]}\nORDER BY total_{cols[2]} DESC\nLIMIT {{limit}};\n")


def sql_blocks(rng: random.Random, copies: int) -> Blocks:
    """Prose, then the same query for ``copies`` statuses, only the filter changing."""
    prose = S.prose_blocks(rng)
    while True:
        query = sql_query(rng)
        statuses = rng.sample(["paid", "open", "refunded", "pending", "failed", "shipped"], copies)
        yield f"{next(prose)}Here is the query for the `{statuses[0]}` rows:\n\n```sql\n"
        for k, status in enumerate(statuses):
            if k:
                yield f"```\n\nAnd the same query for `{status}`, only the filter changes:\n\n```sql\n"
            yield query.format(status=status, limit=rng.choice([10, 20, 50, 100]))
        yield "```\n\n"


def neg_sql_blocks(rng: random.Random) -> Blocks:
    """Two near-identical SQL blocks at a time (the shape of opencrabs #788)."""
    return sql_blocks(rng, 2)


def _primes(limit: int) -> list[int]:
    sieve = bytearray([1]) * (limit + 1)
    sieve[:2] = b"\x00\x00"
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return [i for i, v in enumerate(sieve) if v]


PRIMES = _primes(200_000)


def neg_primes(rng: random.Random) -> Blocks:
    style = rng.choice(["commas", "lines", "python", "table", "sentences"])
    start = rng.choice([0, 0, 0, 100, 1000])
    yield {"commas": "Here are the primes in order:\n\n", "lines": "The primes, one per line:\n\n", "python": "```python\nPRIMES = [\n",
           "table": "| n | p(n) |\n|---|---|\n", "sentences": "Listing the primes one by one:\n\n"}[style]
    for n, p in enumerate(PRIMES[start:], start + 1):
        yield {"commas": f"{p}, ", "lines": f"{p}\n", "python": f" {p},\n" if n % 8 == 0 else f"    {p}," if n % 8 == 1 else f" {p},",
               "table": f"| {n} | {p} |\n", "sentences": f"The prime number {n} is {p}. "}[style]


def neg_thinking_trace(rng: random.Random) -> Blocks:
    for question, steps, final in S.GSM.problems(rng):
        yield f"<think>\n{rng.choice(I.THINKING_OPENERS)} {question}\n\n"
        for attempt in range(rng.randint(1, 3)):
            if attempt:
                yield f"{rng.choice(I.THINKING_PIVOTS)}\n\n"
            for step in steps:
                lead = rng.choice(["", "So ", "Then ", "Next, "])
                yield lead + (step[:1].lower() + step[1:] if lead else step) + "\n"
                for _ in range(rng.choice([0, 0, 1, 1, 2])):
                    yield f"{rng.choice(I.THINKING_CHECKS)} {step} {rng.choice(I.THINKING_CONFIRMS)}\n"
            yield f"\nSo the answer should be {final}. {rng.choice(I.THINKING_CHECKS)} {rng.choice(I.THINKING_CONFIRMS)}\n\n"
        yield f"</think>\n\nThe answer is **{final}**.\n\n"


def neg_non_english(rng: random.Random) -> Blocks:
    languages = rng.sample(list(LANGUAGES), rng.randint(1, 3))
    while True:
        lang = rng.choice(languages)
        make = LANGUAGES[lang]
        yield SEPARATOR[lang].join(make(rng) for _ in range(rng.randint(3, 7))) + "\n\n"


def neg_mixed_script(rng: random.Random) -> Blocks:
    sources = {"zh": I.CHINESE_TECH, "ru": I.RUSSIAN_TECH, "ja": I.JAPANESE_TECH, "science": I.SCIENCE}
    kinds = rng.sample(list(sources), rng.randint(1, 3))
    while True:
        kind = rng.choice(kinds)
        lines = rng.sample(sources[kind], min(len(sources[kind]), rng.randint(2, 5)))
        yield SEPARATOR.get(kind, " ").join(lines) + "\n\n"
        if rng.random() < 0.4:  # code with comments in the same language
            comment = rng.choice(sources[kind]).rstrip("。.")
            yield (f"```python\n# {comment}\nx = torch.randn({rng.randint(2, 64)}, {rng.randint(2, 64)}, device=\"cuda\")\n"
                   f"y = model(x)  # {rng.choice(sources[kind]).rstrip('。.')}\nprint(y.shape)\n```\n\n")
        if kind != "science":
            yield LANGUAGES[kind](rng) + ("" if kind in ("zh", "ja") else " ") + LANGUAGES[kind](rng) + "\n\n"


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def neg_urls_paths_hashes(rng: random.Random) -> Blocks:
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    repos = ["vllm-project/vllm", "sgl-project/sglang", "ROCm/ATOM", "pytorch/pytorch", "huggingface/transformers"]
    yield rng.choice(["Here are the references:", "Links and artifacts from the run:", "Files touched:"]) + "\n\n"
    while True:
        word = S._words(rng, rng.randint(1, 2))
        yield rng.choice([
            f"- https://github.com/{rng.choice(repos)}/blob/{_hex(rng, 40)}/{word.replace('_', '/')}.py#L{rng.randint(1, 2000)}\n",
            f"- https://example.com/api/v{rng.randint(1, 3)}/{word}?id={rng.randint(1, 99999)}&token={_hex(rng, 16)}\n",
            f"- /usr/lib/python3.{rng.randint(8, 12)}/site-packages/{word}/{S._words(rng, 1)}.py\n",
            f"- C:\\Users\\{rng.choice(M.FIRST_NAMES)}\\AppData\\Local\\{word}\\cache\\{_hex(rng, 8)}.bin\n",
            f"- commit {_hex(rng, 40)} ({rng.choice(M.FIRST_NAMES)}, {S.date(rng)})\n",
            f"- sha256:{_hex(rng, 64)}\n",
            f"- {_hex(rng, 8)}-{_hex(rng, 4)}-4{_hex(rng, 3)}-a{_hex(rng, 3)}-{_hex(rng, 12)}\n",
            f"- ghcr.io/{word.replace('_', '-')}/server:v{rng.randint(0, 3)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}@sha256:{_hex(rng, 64)}\n",
            f"- @types/{word.replace('_', '-')}@{rng.randint(1, 20)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}\n",
            f"- data:application/octet-stream;base64,{''.join(rng.choice(b64) for _ in range(rng.randint(24, 96)))}==\n",
            f"- s3://{word.replace('_', '-')}-bucket/{S.date(rng)}/part-{rng.randint(0, 999):05d}.parquet\n",
        ])


def neg_legit_doubles(rng: random.Random) -> Blocks:
    sentences = en_sentence_pool(rng)
    while True:
        r = rng.random()
        if r < 0.35:
            yield " ".join(next(sentences) for _ in range(rng.randint(1, 3))) + " " + rng.choice(I.DOUBLED_GRAMMAR) + "\n\n"
        elif r < 0.55:
            names = rng.sample(I.DOUBLED_NAMES, rng.randint(3, 6))
            yield f"Places and names written twice: {', '.join(names)}. " + next(sentences) + "\n\n"
        elif r < 0.8:
            said = rng.choice(I.DOUBLED_EXPRESSIONS)
            yield f"\"{said.capitalize()}, {rng.choice(['that is fine', 'not like that', 'come here', 'we are late', 'listen'])},\" said {S.person(rng)}. {next(sentences)}\n\n"
        else:
            words = rng.sample(I.CHINESE_REDUPLICATION, 3)
            yield f"{zh_sentence(rng)}我们{words[0]}再说，大家{words[1]}地走，{words[2]}。\n\n"


def neg_count_to_300(rng: random.Random) -> Blocks:
    style = rng.choice(["commas", "lines", "spaces", "words"])
    end = rng.choice([300, 300, 300, 500])
    yield f"Sure, counting to {end}:\n\n"
    for n in range(1, end + 1):
        yield {"commas": f"{n}, ", "lines": f"{n}\n", "spaces": f"{n} ", "words": S._number_words(n) + ", "}[style]
    yield "\nDone!\n\n"
    yield from S.prose_blocks(rng)


NEGATIVES: dict[str, Callable[[random.Random], Blocks]] = {
    "sql_blocks": neg_sql_blocks,
    "primes": neg_primes,
    "count_to_300": neg_count_to_300,
    "thinking_trace": neg_thinking_trace,
    "non_english": neg_non_english,
    "mixed_script": neg_mixed_script,
    "urls_paths_hashes": neg_urls_paths_hashes,
    "legit_doubles": neg_legit_doubles,
}


def make_negative(rng: random.Random, category: str, index: int) -> dict[str, object]:
    target = S.log_uniform(rng, S.MIN_TOKENS, 4000)
    text = "".join(S.take(NEGATIVES[category](rng), target))
    if rng.random() < 0.4:
        text, finish = S.cut_tokens(text, target), "length"
    else:
        finish = "stop"
    return {"id": f"neg-{category}-{index:03d}", "category": category, "text": text, "finish_reason": finish,
            "note": f"healthy {category.replace('_', ' ')}, about {S.ntok(text)} tokens"}


# ---------------------------------------------------------------------------------------------
# requested repetition (look-alikes the loop rules flag; stutter and soup must not)


def requested(rng: random.Random, category: str, index: int) -> dict[str, object]:
    finish = "stop"
    if category == "asked_repetition":
        unit = rng.choice(["ha ", "ha, ", "ha", "HA ", "lol ", "no ", "la "])
        count = rng.choice([100, 500, 1000, 2000, 2000])
        text = f"Sure! Here is \"{unit.strip(', ')}\" {count} times:\n\n" + (unit * count).rstrip(", ") + "\n"
    elif category == "zero_grid":
        rows, cols = rng.randint(8, 60), rng.randint(4, 30)
        style = rng.choice(["numpy", "plain", "csv", "markdown", "floats"])
        row = {"numpy": "[" + " ".join(["0."] * cols) + "]", "plain": " ".join(["0"] * cols), "csv": ",".join(["0"] * cols),
               "markdown": "| " + " | ".join(["0"] * cols) + " |", "floats": ", ".join(["0.0"] * cols)}[style]
        head = f"Here is a {rows}x{cols} grid of zeros:\n\n```\n"
        text = head + ("|" + "---|" * cols + "\n" if style == "markdown" else "") + "\n".join([row] * rows) + "\n```\n"
    else:  # the same query for every status: 3-6 near-identical blocks
        target = S.log_uniform(rng, S.MIN_TOKENS, 3000)
        text = "".join(S.take(sql_blocks(rng, rng.randint(3, 6)), target))
        if rng.random() < 0.4:
            text, finish = S.cut_tokens(text, target), "length"
    return {"id": f"req-{category}-{index:03d}", "category": category, "text": text, "finish_reason": finish,
            "note": f"{category.replace('_', ' ')} the user asked for, {S.ntok(text)} tokens"}


# ---------------------------------------------------------------------------------------------
# positives: stutter


def _doubled(pieces: list[str], rng: random.Random, density: float) -> str:
    """Each word piece written twice with probability ``density``, the way a stuttering
    engine writes it ("The capital capital of of"); punctuation now and then too ("Paris..")."""
    out = []
    for p in pieces:
        out.append(p)
        word = re.search(r"[^\W\d_]", p) is not None
        if (word and rng.random() < density) or (not word and p.strip() and rng.random() < density / 3):
            out.append(p if p.startswith(" ") or not word else (" " + p if re.search(r"[A-Za-zА-я]", p) else p))
    return "".join(out)


def stutter_body(rng: random.Random, lang: str, density: float, tokens: int) -> str:
    sentences = en_sentence_pool(rng) if lang == "en" else None
    out, have = [], 0
    while have < tokens:
        para = (" ".join(next(sentences) for _ in range(rng.randint(2, 5))) if sentences is not None
                else SEPARATOR[lang].join(LANGUAGES[lang](rng) for _ in range(rng.randint(2, 5))))
        block = _doubled(split_pieces(para), rng, density) + "\n\n"
        out.append(block)
        have += S.ntok(block)
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# positives: soup


def _fragment(rng: random.Random, words: list[str], min_len: int = 1) -> str:
    word = rng.choice(words)
    a = rng.randrange(len(word))
    return word[a : a + rng.randint(min_len, 7)] or word


class Vocabulary:
    """Fragments of a multilingual BPE vocabulary, drawn by script with given weights."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        self.latin = [w for w in M.NOUNS + M.ADJECTIVES + M.PRODUCTS + M.VERBS + M.SURNAMES + M.CITIES if len(w) > 2]
        self.cyrillic = [w for s in I.RUSSIAN for w in re.findall(r"[А-яЁё]+", s)]
        self.cjk = [c for s in I.CHINESE for c in s if "\u4e00" <= c <= "\u9fff"]
        self.kana = [c for s in I.JAPANESE for c in s if "\u3040" <= c <= "\u30ff"]

    def draw(self, rng: random.Random) -> str:
        kind = rng.choices(list(self.weights), list(self.weights.values()))[0]
        space = " " if rng.random() < 0.45 else ""
        if kind == "latin":
            piece = _fragment(rng, self.latin, 2)
            return space + (piece.capitalize() if rng.random() < 0.2 else piece)
        if kind == "code":
            return space + rng.choice(I.CODE_FRAGMENTS)
        if kind == "digits":
            return space + str(rng.randint(0, 9999))
        if kind == "punct":
            return rng.choice([".", ",", ";", ":", "!", "?", "-", "(", ")", "'", "\"", "/", " —", "...", " ("])
        if kind == "cyrillic":
            return space + _fragment(rng, self.cyrillic, 2)
        if kind == "cjk":
            return "".join(rng.choice(self.cjk) for _ in range(rng.randint(1, 2)))
        if kind == "kana":
            return "".join(rng.choice(self.kana) for _ in range(rng.randint(1, 2)))
        return space + _fragment(rng, I.OTHER_SCRIPTS, 2)


MULTISCRIPT = Vocabulary({"latin": 0.45, "code": 0.08, "digits": 0.05, "punct": 0.07, "cjk": 0.18, "kana": 0.04, "cyrillic": 0.08, "other": 0.05})
"""Like Qwen's or DeepSeek's vocabularies: a large share of CJK pieces, and Cyrillic."""
LATIN_HEAVY = Vocabulary({"latin": 0.74, "code": 0.1, "digits": 0.05, "punct": 0.07, "cjk": 0.015, "kana": 0.005, "cyrillic": 0.015, "other": 0.005})
"""Like a vocabulary trained mostly on English and code."""


def soup_body(rng: random.Random, vocab: Vocabulary, density: float, tokens: int) -> str:
    """Vocabulary fragments in random order; with probability 1 - density a healthy word of an
    English sentence goes on instead (a garbled stretch that still carries some text)."""
    words = iter(w for s in en_sentence_pool(rng) for w in s.split())
    out, have = [], 0
    while have < tokens:
        chunk = "".join(vocab.draw(rng) if rng.random() < density else " " + next(words) for _ in range(32))
        out.append(chunk)
        have += S.ntok(chunk)
    return "".join(out)


def replaced_body(rng: random.Random, tokens: int) -> str:
    """Healthy text whose characters are replaced now and then: a U+FFFD where a byte of a
    multi-byte character was lost, or a control character (tt-metal #40960: "C?H12O6")."""
    text = "".join(S.take(S.prose_blocks(rng), tokens))
    rate = math.exp(rng.uniform(math.log(1 / 3000), math.log(1 / 50)))
    bad = "\ufffd" if rng.random() < 0.75 else rng.choice(["\x00", "\x01", "\x1b", "\x7f", "\x85", "\x08"])
    chars = [bad if c.isalnum() and rng.random() < rate else c for c in text]
    if bad not in chars:  # at least one, as in the report
        positions = [i for i, c in enumerate(chars) if c.isdigit() or c.isalpha()]
        chars[rng.choice(positions[len(positions) // 4 :])] = bad
    return "".join(chars)


# ---------------------------------------------------------------------------------------------


POSITIVE_CATEGORIES = ["stutter", "stutter_sparse", "soup_multiscript", "soup_latin", "soup_replacement"]


def make_positive(rng: random.Random, category: str, index: int) -> dict[str, object]:
    target = S.log_uniform(rng, S.MIN_TOKENS, S.MAX_TOKENS)
    onset = int(target * rng.choice([0.0, rng.uniform(0.05, 0.5), rng.uniform(0.5, 0.85)]))
    onset = min(onset, target - 200)
    prefix = S.prefix_text(rng, onset) if onset > 0 else ""
    if prefix and not prefix.endswith((" ", "\n")):
        prefix += " "
    budget = max(target - S.ntok(prefix), 200) + 16
    if category.startswith("stutter"):
        lang = rng.choice(["en", "en", "en", "ru", "zh"])
        density = rng.uniform(0.6, 1.0) if category == "stutter" else rng.uniform(0.25, 0.55)
        body, note = stutter_body(rng, lang, density, budget), f"stutter ({lang}, {density:.0%} of words doubled)"
    elif category == "soup_replacement":
        body, note = replaced_body(rng, budget), "healthy text with replaced characters"
    else:
        density = rng.uniform(0.5, 1.0) if category == "soup_multiscript" else rng.uniform(0.3, 1.0)
        vocab = MULTISCRIPT if category == "soup_multiscript" else LATIN_HEAVY
        body, note = soup_body(rng, vocab, density, budget), f"{category.replace('_', ' ')} ({density:.0%} of pieces)"
    if rng.random() < 0.2:
        text, finish = (prefix + body).rstrip(), "stop"
    else:
        text, finish = S.cut_tokens(prefix + body, max(target, S.ntok(prefix) + 200)), "length"
    return {"id": f"pos-{category}-{index:03d}", "category": category, "text": text, "finish_reason": finish,
            "note": f"{note} from token {S.ntok(prefix)} of {S.ntok(text)}", "loop_start": len(prefix)}


def build() -> dict[str, list[dict[str, object]]]:
    rng = random.Random(f"{S.SEED}-garbled")  # a str seed is hashed with SHA-512: the same in every process
    positives = [make_positive(rng, c, i) for c in POSITIVE_CATEGORIES for i in range(N_PER_CATEGORY)]
    negatives = [make_negative(rng, c, i) for c in NEGATIVES for i in range(N_PER_CATEGORY)]
    asked = [requested(rng, c, i) for c in ("asked_repetition", "zero_grid", "sql_per_status") for i in range(N_PER_CATEGORY // 2)]
    return {"garbled_positives": positives, "garbled_negatives": negatives, "requested": asked}


if __name__ == "__main__":
    S.write_or_check(build(), check=sys.argv[1:] == ["--check"], script=Path(__file__).resolve())

"""Generate the collapse detector's test suites: positives.jsonl and negatives.jsonl.

Run from anywhere:  python3 tests/data/detector/make_suites.py   (--check: compare only)
The output is a pure function of SEED, this file, material.py, layouts.py, the shipped GSM8K
train split and the detector's split_text (it counts tokens), so the committed files can be
regenerated and reviewed as a diff; a test checks that they are up to date. The 2-D layouts
of layouts.py (matrices, zero-padded columns, grids and bitmaps, hex dumps, CSV of mostly
zeros: long runs of one number token that are data) come last, from their own seeded stream,
so adding them changed no earlier sample.

Each line is ``{"id", "category", "text", "finish_reason", "note"}``; positives also carry
``loop_start``, the character offset where the collapse begins (the tests measure early-abort
savings from it).

Negatives are healthy texts chosen to look repetitive to a naive detector (tables, code,
counting, refrains...). Positives are healthy prefixes that fall into a loop, the way a
corrupted engine's output does: the loop starts at a piece boundary and, for finish_reason
"length", runs until the text is cut at its token budget, mid-unit. Lengths are log-uniform
over 500-8000 tokens as counted by the detector's ``split_text``.

Honest limits of what the positives claim: a loop runs for at least 160 tokens and 3.5
copies of its unit after its onset (shorter repetition at the end of a healthy text is
indistinguishable from a song's last refrain); a loop whose copies differ (a counter) for at
least 320, one with no fixed period ("drifting") for at least 400; and a positive that ends
with "stop" for at least 800 (1000 when the copies differ).
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import layouts as L
import material as M

from evalkit.evals.detector._text import split_pieces

SEED = 1596
N_NEGATIVE_PER_CATEGORY = 35
N_POSITIVE_PER_CATEGORY = 55
MIN_TOKENS, MAX_TOKENS = 500, 8000

Blocks = Iterator[str]


# ---------------------------------------------------------------------------------------------
# helpers


def ntok(text: str) -> int:
    return len(split_pieces(text))


def cut_tokens(text: str, n: int) -> str:
    """The first ``n`` pieces: what a max_tokens cut leaves."""
    return "".join(split_pieces(text)[:n])


def log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def take(blocks: Blocks, target: int) -> list[str]:
    """Blocks from the generator until they hold at least ``target`` tokens (counted on the
    joined text: pieces can merge across a block boundary)."""
    out, total = [], 0
    for block in blocks:
        out.append(block)
        total += ntok(block)
        if total >= target and ntok("".join(out)) >= target:
            return out
    return out


def person(rng: random.Random) -> str:
    return f"{rng.choice(M.FIRST_NAMES)} {rng.choice(M.SURNAMES)}"


def date(rng: random.Random, year: int | None = None) -> str:
    return f"{year or rng.randint(2019, 2025)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def money(rng: random.Random, lo: float, hi: float) -> str:
    return f"{rng.uniform(lo, hi):,.2f}"


class Pool:
    """Items drawn without replacement, so a document never repeats one by accident: the
    negatives must only repeat what their category repeats (rows' shape, a refrain...)."""

    def __init__(self, rng: random.Random, items: list[str]) -> None:
        self.items = rng.sample(items, len(items))

    def draw(self, fallback: Callable[[], str]) -> str:
        return self.items.pop() if self.items else fallback()


class Gsm:
    """GSM8K train problems as natural text: questions, and solutions without calculator marks."""

    def __init__(self) -> None:
        path = ROOT / "evalkit" / "data" / "gsm8k" / "train.jsonl"
        self.rows = [json.loads(line) for line in path.read_text().splitlines()]
        self.sentences = [s for row in self.rows for s in re.split(r"(?<=[.?!])\s+", row["question"]) if len(s) > 30]

    def problems(self, rng: random.Random) -> Iterator[tuple[str, list[str], str]]:
        """Problems in random order, none twice."""
        for i in rng.sample(range(len(self.rows)), len(self.rows)):
            yield self.solution(self.rows[i])

    def solution(self, row: dict[str, str]) -> tuple[str, list[str], str]:
        body, _, final = row["answer"].rpartition("####")
        steps = [re.sub(r"<<[^>]*>>", "", s).strip() for s in body.strip().splitlines() if s.strip()]
        return row["question"], steps, final.strip()

    def sentence_pool(self, rng: random.Random) -> Iterator[str]:
        for i in rng.sample(range(len(self.sentences)), len(self.sentences)):
            yield self.sentences[i]


GSM = Gsm()


def prose_blocks(rng: random.Random) -> Blocks:
    """Explanation paragraphs and GSM8K stories, as an assistant's long answer would mix them;
    nothing twice."""
    paragraphs = Pool(rng, [p for paras in M.EXPLANATIONS.values() for p in paras])
    sentences = GSM.sentence_pool(rng)
    while True:
        if rng.random() < 0.4 and paragraphs.items:
            yield paragraphs.draw(str) + "\n\n"
        else:
            yield " ".join(next(sentences) for _ in range(rng.randint(2, 5))) + "\n\n"


# ---------------------------------------------------------------------------------------------
# hard negatives: each yields an intro, then an endless body (callers cut it at the budget)


def neg_markdown_table(rng: random.Random) -> Blocks:
    prose = prose_blocks(rng)
    schemas: list[tuple[str, list[str], Callable[[int], list[str]]]] = [
        ("Here is the employee roster you asked for:", ["ID", "Name", "Department", "City", "Start date", "Salary"],
         lambda i: [f"E{1000 + i}", person(rng), rng.choice(M.DEPARTMENTS), rng.choice(M.CITIES), date(rng), f"${rng.randint(42, 180)},{rng.randint(0, 999):03d}"]),
        ("Current stock levels per warehouse:", ["SKU", "Product", "Qty", "Unit", "Warehouse", "Status"],
         lambda i: [f"SKU-{rng.randint(10000, 99999)}", rng.choice(M.ADJECTIVES).title() + " " + rng.choice(M.PRODUCTS), str(rng.randint(0, 900)), rng.choice(["pcs", "pcs", "boxes"]), rng.choice(["North", "South", "East"]), rng.choice(["OK", "OK", "OK", "Low", "Reorder"])]),
        ("Results of the hyperparameter sweep:", ["Run", "Model", "Batch", "LR", "Accuracy", "Loss", "Notes"],
         lambda i: [str(i + 1), rng.choice(["resnet18", "resnet50", "vit-b16", "mlp"]), str(rng.choice([32, 64, 128, 256])), f"{rng.choice([1, 3, 5])}e-{rng.randint(2, 5)}", f"{rng.uniform(0.6, 0.97):.3f}", f"{rng.uniform(0.05, 1.4):.3f}", rng.choice(["", "", "diverged", "early stop", "best so far", "warmup 5%"])]),
        ("League table after the latest round:", ["Pos", "Team", "P", "W", "D", "L", "GF", "GA", "Pts"],
         lambda i: [str(i + 1), rng.choice(M.CITIES) + " " + rng.choice(["FC", "United", "Rovers", "Athletic", "City"]), *(str(rng.randint(0, 38)) for _ in range(6)), str(rng.randint(10, 90))]),
        ("Recurring meetings for the quarter (same slot every week):", ["Date", "Day", "Time", "Meeting", "Room"],
         lambda i: [f"2025-{1 + i // 20 % 12:02d}-{1 + i % 28:02d}", rng.choice(["Mon", "Mon", "Wed", "Fri"]), "09:30", rng.choice(["Standup", "Standup", "Standup", "Planning"]), rng.choice(["A1", "A1", "B2"])]),
        ("Conference schedule:", ["Date", "Time", "Room", "Speaker", "Topic"],
         lambda i: [date(rng, 2025), f"{rng.randint(8, 18):02d}:{rng.choice(['00', '15', '30', '45'])}", rng.choice(["A1", "A2", "B", "Main hall"]), person(rng), rng.choice(M.ADJECTIVES).title() + " " + rng.choice(M.NOUNS) + "s and " + rng.choice(M.NOUNS) + "s"]),
    ]
    row_index = 0
    while True:
        intro, header, row = rng.choice(schemas)
        yield f"{intro}\n\n| " + " | ".join(header) + " |\n|" + "|".join("---" for _ in header) + "|\n"
        for _ in range(rng.randint(15, 120)):
            yield "| " + " | ".join(row(row_index)) + " |\n"
            row_index += 1
        yield "\n" + next(prose)


def neg_csv(rng: random.Random) -> Blocks:
    kind = rng.choice(["sensor", "sales", "people", "meter"])
    if kind == "sensor":
        yield "timestamp,sensor_id,temperature_c,humidity_pct,battery_v,status\n"
        minute = rng.randint(0, 10_000)
        while True:
            minute += rng.choice([1, 1, 1, 2, 5])
            status = rng.choice(["ok"] * 12 + ["warn", "error"])
            yield (f"2024-{3 + minute // 40320:02d}-{1 + minute // 1440 % 28:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00,"
                   f"s-{rng.randint(1, 12):02d},{rng.gauss(21, 3):.1f},{rng.randint(30, 70)},{rng.uniform(3.4, 4.2):.2f},{status}\n")
    elif kind == "meter":  # one sensor, one status: only the clock and the reading change
        yield "timestamp,meter,reading_kwh,status\n"
        minute, reading = rng.randint(0, 10_000), rng.uniform(1000, 9000)
        while True:
            minute += 15
            reading += rng.uniform(0.1, 3.0)
            yield f"2024-07-{1 + minute // 1440 % 28:02d} {minute // 60 % 24:02d}:{minute % 60:02d},M-7,{reading:.1f},ok\n"
    elif kind == "sales":
        yield "order_id,date,customer,product,quantity,unit_price,currency,region\n"
        order = rng.randint(10_000, 90_000)
        while True:
            order += rng.randint(1, 3)
            yield (f"{order},{date(rng, 2024)},{person(rng)},{rng.choice(M.PRODUCTS)},{rng.randint(1, 12)},"
                   f"{rng.uniform(2, 400):.2f},EUR,{rng.choice(['EMEA', 'EMEA', 'APAC', 'AMER'])}\n")
    else:
        yield "id,first_name,last_name,email,city,signup_date,plan\n"
        i = rng.randint(1, 5000)
        while True:
            i += 1
            first, last = rng.choice(M.FIRST_NAMES), rng.choice(M.SURNAMES)
            yield f"{i},{first},{last},{first.lower()}.{last.lower()}@example.com,{rng.choice(M.CITIES)},{date(rng)},{rng.choice(['free', 'free', 'pro', 'team'])}\n"


def _words(rng: random.Random, k: int) -> str:
    return "_".join(rng.choice(M.NOUNS + M.ADJECTIVES) for _ in range(k))


def neg_code_repeated(rng: random.Random) -> Blocks:
    kind = rng.choice(["tests", "switch", "accessors", "sql", "html", "converters", "mapping", "argparse", "defines"])
    if kind == "tests":
        yield "import unittest\n\nfrom calc import add, sub, mul, clamp\n\n\nclass TestCalc(unittest.TestCase):\n"
        while True:
            op = rng.choice(["add", "sub", "mul", "clamp"])
            a, b = rng.randint(-50, 500), rng.randint(-50, 500)
            res = {"add": a + b, "sub": a - b, "mul": a * b, "clamp": max(0, min(a, b))}[op]
            yield f"    def test_{op}_{_words(rng, 2)}(self):\n        self.assertEqual({op}({a}, {b}), {res})\n\n"
    elif kind == "switch":
        yield "const char *describe_error(int code) {\n    switch (code) {\n"
        codes = rng.sample(range(100, 9999), 4000)
        while True:
            code = codes.pop()
            msg = f"{rng.choice(M.ADJECTIVES)} {rng.choice(M.NOUNS)} {rng.choice(['failed', 'missing', 'timed out', 'rejected', 'not found', 'busy'])}"
            extra = f"            log_event({code});\n" if rng.random() < 0.3 else ""
            yield f"        case {code}:\n{extra}            return \"{msg}\";\n"
    elif kind == "accessors":
        yield "class Record:\n    \"\"\"A plain record with explicit accessors (generated).\"\"\"\n\n"
        while True:
            field = _words(rng, rng.randint(1, 2))
            typ = rng.choice(["int", "str", "float", "bool", "list[str]"])
            yield (f"    @property\n    def {field}(self) -> {typ}:\n        return self._{field}\n\n"
                   f"    @{field}.setter\n    def {field}(self, value: {typ}) -> None:\n        self._{field} = value\n\n")
    elif kind == "sql":
        yield "-- seed data for the staging database\nBEGIN;\n"
        i = rng.randint(1, 900)
        while True:
            i += 1
            first, last = rng.choice(M.FIRST_NAMES), rng.choice(M.SURNAMES)
            yield f"INSERT INTO users (id, name, email, city, created_at) VALUES ({i}, '{first} {last}', '{first.lower()}{rng.randint(1, 99)}@mail.test', '{rng.choice(M.CITIES)}', '{date(rng)}');\n"
    elif kind == "html":
        yield "<ul class=\"product-list\">\n"
        while True:
            name = rng.choice(M.ADJECTIVES).title() + " " + rng.choice(M.PRODUCTS)
            slug = name.lower().replace(" ", "-")
            yield f"  <li class=\"item\"><a href=\"/products/{slug}-{rng.randint(10, 999)}\">{name}</a> <span class=\"price\">${rng.randint(5, 300)}.{rng.randint(0, 99):02d}</span></li>\n"
    elif kind == "converters":
        yield "\"\"\"Unit conversions.\"\"\"\n\n"
        while True:
            a, b = rng.sample(["meters", "feet", "inches", "miles", "kilometers", "yards", "grams", "pounds", "ounces", "liters", "gallons", "cups"], 2)
            yield f"def {a}_to_{b}(value: float) -> float:\n    \"\"\"Convert {a} to {b}.\"\"\"\n    return value * {rng.uniform(0.001, 1000):.6g}\n\n\n"
    elif kind == "argparse":
        yield "import argparse\n\nparser = argparse.ArgumentParser(description=\"Batch job options\")\n"
        while True:
            name = _words(rng, rng.randint(1, 2)).replace("_", "-")
            typ = rng.choice(["int", "float", "str"])
            default = {"int": rng.randint(0, 64), "float": round(rng.uniform(0, 1), 3), "str": f"\"{rng.choice(M.NOUNS)}\""}[typ]
            yield f"parser.add_argument(\"--{name}\", type={typ}, default={default}, help=\"the {name.replace('-', ' ')} setting\")\n"
    elif kind == "defines":
        yield "/* register map (generated) */\n"
        offset = 0
        while True:
            offset += rng.choice([4, 4, 4, 8])
            yield f"#define REG_{_words(rng, 2).upper()}_OFFSET 0x{offset:04X}\n"
    else:
        yield "TRANSLATIONS = {\n"
        while True:
            yield f"    \"{_words(rng, rng.randint(1, 3))}\": \"{rng.choice(M.ADJECTIVES)} {rng.choice(M.NOUNS)}\",\n"


def neg_numbered_list(rng: random.Random) -> Blocks:
    yield rng.choice(["Here is the full list:", "Below are the items, numbered:", "Sure, here they are:"]) + "\n\n"
    tips, sentences = Pool(rng, M.TIPS), GSM.sentence_pool(rng)
    k = 0
    while True:
        k += 1
        item = tips.draw(lambda: next(sentences)) if rng.random() < 0.15 else next(sentences)
        yield f"{k}. {item}\n"


def _number_words(n: int) -> str:
    ones = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
    tens = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    if n < 20:
        return ones[n]
    if n < 100:
        return tens[n // 10] + ("" if n % 10 == 0 else "-" + ones[n % 10])
    if n < 1000:
        rest = n % 100
        return ones[n // 100] + " hundred" + ("" if rest == 0 else " " + _number_words(rest))
    rest = n % 1000
    return _number_words(n // 1000) + " thousand" + ("" if rest == 0 else " " + _number_words(rest))


def neg_counting(rng: random.Random) -> Blocks:
    kind = rng.choice(["commas", "lines", "down", "times", "squares", "words", "evens"])
    start = rng.choice([1, 1, 1, 0, 10, 100])
    yield {"commas": "Counting from {s}:\n\n", "lines": "Here are the numbers, one per line:\n\n", "down": "Counting down:\n\n",
           "times": "Multiplication table:\n\n", "squares": "The squares:\n\n", "words": "Spelled out:\n\n", "evens": "Even numbers:\n\n"}[kind].format(s=start)
    n = start
    if kind == "down":
        n = rng.choice([2000, 5000, 9999])
    while True:
        if kind == "commas":
            yield f"{n}, "
        elif kind == "lines":
            yield f"{n}\n"
        elif kind == "down":
            yield f"{n}, "
            n -= 2
        elif kind == "times":
            base = 2 + (n // 12) % 18
            yield f"{base} x {n % 12 + 1} = {base * (n % 12 + 1)}\n" + ("\n" if n % 12 == 11 else "")
        elif kind == "squares":
            yield f"{n}^2 = {n * n}\n"
        elif kind == "words":
            yield _number_words(n) + ", "
        else:
            yield f"{2 * n}, "
        n += 1


def neg_repeated_headers(rng: random.Random) -> Blocks:
    kind = rng.choice(["weeks", "days", "regions"])
    sentences = GSM.sentence_pool(rng)
    yield {"weeks": "# Project status report\n\n", "days": "# Two-week itinerary\n\n", "regions": "# Quarterly results by region\n\n"}[kind]
    k = 0
    while True:
        k += 1
        if kind == "weeks":
            yield (f"## Week {k}\n\n**Highlights:** {next(sentences)} The {rng.choice(M.DEPARTMENTS).lower()} team "
                   f"{rng.choice(['shipped', 'reviewed', 'started', 'finished', 'paused'])} the {rng.choice(M.ADJECTIVES)} {rng.choice(M.NOUNS)} milestone.\n\n"
                   f"**Metrics:** {rng.randint(3, 60)} tickets closed, {rng.randint(0, 12)} opened, uptime {rng.uniform(98.5, 100):.2f}%.\n\n"
                   f"**Risks:** {next(sentences)}\n\n**Next:** {person(rng)} owns {rng.choice(['the migration', 'the launch checklist', 'vendor review', 'the budget draft', 'hiring'])}.\n\n")
        elif kind == "days":
            city = rng.choice(M.CITIES)
            yield (f"## Day {k}: {city}\n\n- **Morning:** walk to the {rng.choice(M.ADJECTIVES)} {rng.choice(M.NOUNS)} and have breakfast near {rng.choice(M.PLACES).strip()}.\n"
                   f"- **Afternoon:** {next(sentences)}\n- **Evening:** dinner at {rng.choice(M.SURNAMES)}'s, about {rng.randint(15, 60)} euros per person.\n"
                   f"- **Travel:** {rng.randint(1, 6)} hours by {rng.choice(['train', 'bus', 'ferry', 'car'])} to the next stop.\n\n")
        else:
            yield (f"## Region {k}: {rng.choice(M.CITIES)} office\n\nRevenue was {money(rng, 0.5, 9)} million, {rng.choice(['up', 'down'])} "
                   f"{rng.uniform(0.5, 14):.1f}% on the previous quarter. {next(sentences)} Headcount is {rng.randint(12, 400)}.\n\n")


def _box(lines: list[str]) -> str:
    width = max(len(line) for line in lines)
    return "+" + "-" * (width + 2) + "+\n" + "".join(f"| {line.ljust(width)} |\n" for line in lines) + "+" + "-" * (width + 2) + "+\n"


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + [line]


def neg_ascii_art(rng: random.Random) -> Blocks:
    prose = prose_blocks(rng)
    def tree() -> str:
        out = [f"{_words(rng, 1)}/"]
        for d, directory in enumerate(rng.sample(["src", "tests", "docs", "scripts", "config", "assets", "data"], rng.randint(2, 5))):
            out.append(f"├── {directory}/")
            for f in range(rng.randint(1, 6)):
                out.append(f"│   ├── {_words(rng, rng.randint(1, 2))}.{rng.choice(['py', 'md', 'json', 'yaml', 'ts'])}")
        out.append("└── README.md")
        return "\n".join(out) + "\n"

    def bars() -> str:
        out = []
        for label in rng.sample(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 8):
            v = rng.randint(1, 40)
            out.append(f"{label} | {'#' * v} {v}")
        return "\n".join(out) + "\n"

    def pyramid() -> str:
        h = rng.randint(4, 12)
        ch = rng.choice("*#^o")
        return "".join(" " * (h - i) + ch * (2 * i - 1) + "\n" for i in range(1, h + 1))

    def board() -> str:
        rows = [" " + " | ".join(rng.choice("XO ") for _ in range(3)) for _ in range(3)]
        return "\n---+---+---\n".join(rows) + "\n"

    def maze() -> str:
        w, h = rng.randint(5, 10), rng.randint(4, 8)
        out = ["+" + "--+" * w]
        for _ in range(h):
            out.append("|" + "".join("  " + rng.choice("| ") for _ in range(w)))
            out.append("+" + "".join(rng.choice(["--+", "  +"]) for _ in range(w)))
        return "\n".join(out) + "\n"

    def flow() -> str:
        steps = rng.sample(["Start", "Read input", "Validate", "Parse", "Transform", "Store", "Notify", "Retry", "End"], 5)
        return "".join(f"[ {s} ]\n    |\n    v\n" for s in steps[:-1]) + f"[ {steps[-1]} ]\n"

    makers = [tree, bars, pyramid, board, maze, flow, lambda: _box(_wrap(next(prose), rng.randint(30, 60)))]
    while True:
        yield rng.choice(["Here is a diagram:", "The layout looks like this:", "Sketch:", "For example:"]) + "\n\n```\n" + rng.choice(makers)() + "```\n\n"
        if rng.random() < 0.5:
            yield next(prose)


def _verse(rng: random.Random, lines: int) -> str:
    templates = [
        "The {adj} {noun} {verb} by {place},",
        "and I {verb2} the {noun} of {place},",
        "where the {adj} {noun}s {verb2} all night,",
        "{Adj} as a {noun}, {adj} as the {noun2},",
        "I walked to {place} when the {noun} was {adj},",
        "you said the {noun} would {verb2} again,",
    ]
    out = []
    for _ in range(lines):
        adj = rng.choice(M.ADJECTIVES)
        out.append(rng.choice(templates).format(adj=adj, Adj=adj.title(), noun=rng.choice(M.NOUNS), noun2=rng.choice(M.NOUNS),
                                                verb=rng.choice(M.VERBS), verb2=rng.choice(M.VERBS).rstrip("s"), place=rng.choice(M.PLACES).strip()))
    text = "\n".join(out)
    return text[0].upper() + text[1:].rstrip(",") + "."


def _twelve_days() -> Blocks:
    for day in range(12):
        gifts = M.TWELVE_DAYS_GIFTS[day::-1]
        listed = ",\n".join(gifts[:-1]) + (",\nand " if day else "") + gifts[-1]
        yield f"On the {M.ORDINALS[day]} day of Christmas\nmy true love sent to me\n{listed}.\n\n"


def _jack() -> Blocks:
    for k in range(1, len(M.JACK_HOUSE) + 1):
        chain = "".join(f"That {M.JACK_HOUSE[j][1]} {M.JACK_HOUSE[j - 1][0]}\n" for j in range(k - 1, 0, -1))
        yield f"This is {M.JACK_HOUSE[k - 1][0]}\n{chain}That {M.JACK_HOUSE[0][1]} the house that Jack built.\n\n"


def _farm(rng: random.Random) -> Blocks:
    for animal, sound in rng.sample(M.FARM_ANIMALS, rng.randint(4, 8)):
        yield (f"Old MacDonald had a farm, E-I-E-I-O,\nAnd on that farm he had a {animal}, E-I-E-I-O,\n"
               f"With a {sound} {sound} here and a {sound} {sound} there,\nHere a {sound}, there a {sound}, everywhere a {sound} {sound},\n"
               "Old MacDonald had a farm, E-I-E-I-O.\n\n")


def _song(rng: random.Random, refrains: Pool) -> Blocks:
    """An original song: verses of new lines, the same refrain after each, sometimes twice at the end."""
    refrain = refrains.draw(lambda: _verse(rng, rng.randint(2, 4))) if rng.random() < 0.4 else _verse(rng, rng.randint(2, 4))
    yield f"## {rng.choice(M.ADJECTIVES).title()} {rng.choice(M.NOUNS).title()}\n\n"
    for _ in range(rng.randint(3, 6)):
        yield f"{_verse(rng, rng.randint(4, 6))}\n\n*Chorus:*\n{refrain}\n\n"
    if rng.random() < 0.5:
        yield f"*Chorus:*\n{refrain}\n\n"


def neg_poem_song(rng: random.Random) -> Blocks:
    """A songbook: original songs with refrains, and each public-domain cumulative song at most once."""
    prose = prose_blocks(rng)
    traditional = [_twelve_days(), _jack(), _farm(rng)]
    refrains = Pool(rng, M.REFRAINS)
    rng.shuffle(traditional)
    while True:
        if traditional and rng.random() < 0.35:
            yield from traditional.pop()
        else:
            yield from _song(rng, refrains)
        yield next(prose)


def neg_long_reasoning(rng: random.Random) -> Blocks:
    for k, (question, steps, final) in enumerate(GSM.problems(rng), 1):
        numbered = "".join(f"Step {i}: {s}\n" for i, s in enumerate(steps, 1))
        yield f"**Problem {k}.** {question}\n\nLet's think step by step.\n{numbered}So the answer is {final}.\n\n"


def neg_phrase_repeats(rng: random.Random) -> Blocks:
    prose = prose_blocks(rng)
    if rng.random() < 0.5:
        lead = rng.choice(list(M.ANAPHORA))
        completions = Pool(rng, M.ANAPHORA[lead])
        while True:
            if completions.items:  # a speech repeats its opening words, not its sentences
                yield "".join(f"{lead} {completions.draw(str)}. " for _ in range(min(len(completions.items), rng.randint(3, 5)))) + "\n\n"
            yield next(prose)
    else:
        phrase = rng.choice(M.REMINDERS)
        while True:
            block = next(prose)
            yield block if rng.random() < 0.6 else block.rstrip() + f" {phrase}\n\n"


def neg_json_array(rng: random.Random) -> Blocks:
    kind = rng.choice(["users", "products", "events"])
    yield "```json\n[\n"
    i = rng.randint(1, 5000)
    first = True
    while True:
        i += 1
        if kind == "users":
            f, l = rng.choice(M.FIRST_NAMES), rng.choice(M.SURNAMES)
            obj = {"id": i, "name": f"{f} {l}", "email": f"{f.lower()}.{l.lower()}@example.org", "active": rng.random() < 0.8,
                   "role": rng.choice(["viewer", "editor", "admin"]), "city": rng.choice(M.CITIES), "created_at": f"{date(rng)}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"}
        elif kind == "products":
            obj = {"sku": f"P-{rng.randint(10000, 99999)}", "name": f"{rng.choice(M.ADJECTIVES).title()} {rng.choice(M.PRODUCTS)}", "price": round(rng.uniform(3, 500), 2),
                   "currency": "EUR", "in_stock": rng.randint(0, 300), "tags": rng.sample(["new", "sale", "eco", "gift", "bulk", "limited"], rng.randint(0, 3))}
        else:
            obj = {"event": rng.choice(["page_view", "click", "signup", "purchase", "logout"]), "user_id": rng.randint(1, 99999), "ts": 1_700_000_000 + i * rng.randint(1, 90),
                   "properties": {"path": rng.choice(M.HTTP_PATHS).replace("{id}", str(rng.randint(1, 999))), "ms": rng.randint(5, 3000)}}
        body = json.dumps(obj, indent=2, ensure_ascii=False).replace("\n", "\n  ")
        yield ("  " if first else ",\n  ") + body
        first = False


def neg_logs(rng: random.Random) -> Blocks:
    t = rng.randint(0, 80_000)
    ms = 0
    while True:
        t += rng.choice([0, 0, 1, 1, 2, 3, 7])
        ms = (ms + rng.randint(1, 997)) % 1000
        template = rng.choice(M.LOG_MESSAGES)
        fields = {"user": f"u{rng.randint(100, 99999)}", "ip": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}", "method": rng.choice(["GET", "GET", "POST", "PUT", "DELETE"]),
                  "path": rng.choice(M.HTTP_PATHS).replace("{id}", str(rng.randint(1, 99999))), "ms": rng.randint(1, 2500), "status": rng.choice([200, 200, 200, 201, 204, 301, 400, 404, 500]),
                  "key": f"{rng.choice(['session', 'user', 'cart', 'rate'])}:{rng.randint(1000, 999999)}", "n": rng.randint(1, 5000), "m": 64, "job": f"job-{rng.randint(1000, 9999)}",
                  "ts2": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}", "sec": rng.randint(1, 3600), "host": rng.choice(["payments.internal", "geo.internal", "auth.internal"]),
                  "k": rng.randint(1, 5), "table": rng.choice(M.TABLES), "inv": f"INV-{rng.randint(10000, 99999)}", "cust": f"C{rng.randint(100, 9999)}", "amount": money(rng, 5, 5000),
                  "email": f"{rng.choice(M.FIRST_NAMES).lower()}@example.com", "tpl": rng.choice(["welcome", "reset", "receipt"]), "pct": rng.randint(40, 97), "obj": f"{_words(rng, 2)}.png",
                  "kb": rng.randint(1, 9000), "bucket": rng.choice(["media", "backups", "exports"])}
        level = rng.choice(["INFO"] * 8 + ["DEBUG", "WARN", "ERROR"])
        yield f"2024-06-{1 + t // 86400 % 28:02d} {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}.{ms:03d} {level:<5} [{rng.choice(M.LOG_MODULES)}] {template.format(**fields)}\n"


def neg_chat_answer(rng: random.Random) -> Blocks:
    prose = prose_blocks(rng)
    for question, steps, final in GSM.problems(rng):
        yield f"**User:** {question}\n\n**Assistant:** {rng.choice(M.CHAT_OPENERS)}\n\n"
        for s in steps:
            yield f"- {s}\n"
        yield f"\n**Answer:** {final}\n\n{rng.choice(M.CHAT_CLOSERS)}\n\n"
        if rng.random() < 0.4:
            yield next(prose)


NEGATIVES: dict[str, Callable[[random.Random], Blocks]] = {
    "markdown_table": neg_markdown_table,
    "csv": neg_csv,
    "code_repeated": neg_code_repeated,
    "numbered_list": neg_numbered_list,
    "counting": neg_counting,
    "repeated_headers": neg_repeated_headers,
    "ascii_art": neg_ascii_art,
    "poem_song": neg_poem_song,
    "long_reasoning": neg_long_reasoning,
    "phrase_repeats": neg_phrase_repeats,
    "json_array": neg_json_array,
    "logs": neg_logs,
    "chat_answer": neg_chat_answer,
}
CLOSERS = {"json_array": "\n]\n```\n", "code_repeated": "\n", "counting": "\n"}

LAYOUT_NEGATIVES: dict[str, Callable[[random.Random], Blocks]] = {
    "identity_matrix": lambda rng: L.matrix_blocks(rng, prose_blocks(rng), L.ONE_PER_ROW),
    "sparse_matrix": lambda rng: L.matrix_blocks(rng, prose_blocks(rng), L.SPARSE),
    "zero_padded": lambda rng: L.zero_padded_blocks(rng, prose_blocks(rng), M.NOUNS + M.ADJECTIVES),
    "grid_bitmap": lambda rng: L.grid_blocks(rng, prose_blocks(rng)),
    "hex_dump": lambda rng: L.hex_blocks(rng, prose_blocks(rng), GSM.sentence_pool(rng)),
    "sparse_csv": lambda rng: L.sparse_csv_blocks(rng, prose_blocks(rng), M.NOUNS + M.PRODUCTS, lambda: person(rng)),
}
"""2-D numeric layouts (layouts.py): long runs of one number token that are data, not a loop.
Drawn from their own seeded stream, after the other suites, so adding them left every earlier
sample as it was."""


def make_negative(rng: random.Random, category: str, index: int) -> dict[str, object]:
    target = log_uniform(rng, MIN_TOKENS, MAX_TOKENS)
    blocks = take({**NEGATIVES, **LAYOUT_NEGATIVES}[category](rng), target)
    if rng.random() < 0.4:
        text, finish = cut_tokens("".join(blocks), target), "length"
    else:
        text, finish = "".join(blocks).rstrip(" ,") + CLOSERS.get(category, ""), "stop"
    assert ntok(text) >= MIN_TOKENS, category
    return {"id": f"neg-{category}-{index:03d}", "category": category, "text": text, "finish_reason": finish,
            "note": f"healthy {category.replace('_', ' ')}, about {ntok(text)} tokens"}


# ---------------------------------------------------------------------------------------------
# positives: a healthy prefix, then a loop


PREFIXES = ["chat_answer", "long_reasoning", "phrase_repeats", "numbered_list", "markdown_table", "repeated_headers"]


def prefix_text(rng: random.Random, tokens: int, kinds: list[str] | None = None, slack: float = 1.3) -> str:
    """A healthy prefix of about ``tokens`` tokens that ends at a block boundary, or is cut
    mid-block when the last block would overshoot by more than ``slack``."""
    if tokens <= 0:
        return ""
    kind = rng.choice(kinds or PREFIXES)
    blocks = take(NEGATIVES[kind](rng), tokens)
    text = "".join(blocks)
    return text if ntok(text) <= tokens * slack else cut_tokens(text, tokens)


class Loop:
    """One kind of loop: ``unit(k)`` is the k-th copy; ``exact`` when every copy is equal."""

    def __init__(self, unit: Callable[[int], str], kind: str, exact: bool) -> None:
        self.unit, self.kind, self.exact = unit, kind, exact


def loop_single(rng: random.Random) -> Loop:
    token = rng.choice(M.SINGLE_TOKENS)
    return Loop(lambda k: token, f"single token {token!r}", True)


def loop_phrase(rng: random.Random, prefix: str) -> Loop:
    if rng.random() < 0.5 or not prefix.strip():
        phrase = rng.choice(M.LOOP_PHRASES)
    else:  # a fragment of what the model just wrote
        pieces = split_pieces(prefix.rstrip())
        length = rng.randint(2, 12)
        phrase = "".join(pieces[-length:])
        if not phrase.startswith(" "):
            phrase = " " + phrase.lstrip()
    return Loop(lambda k: phrase, f"phrase {phrase!r}", True)


def loop_paragraph(rng: random.Random, prefix: str, max_period: int) -> Loop:
    paragraphs = [p for p in re.split(r"(?<=\n\n)", prefix) if 8 <= ntok(p) <= max_period]
    if paragraphs and rng.random() < 0.7:
        unit = paragraphs[-1] if rng.random() < 0.6 else rng.choice(paragraphs)
    else:
        unit = " ".join(rng.sample(GSM.sentences, 2)) + "\n\n"
    while ntok(unit) > max_period:
        unit = cut_tokens(unit, max_period)
    if rng.random() < 0.25 and len(paragraphs) >= 2 and ntok(paragraphs[-2] + unit) <= max_period:
        unit = paragraphs[-2] + unit  # two paragraphs alternating
    return Loop(lambda k: unit, f"paragraph of {ntok(unit)} tokens", True)


def loop_counter(rng: random.Random) -> Loop:
    templates = [
        "Step {k}: We add 3 to the running total, then check whether the new total is divisible by 7, and if it is not, we repeat the same step. ",
        "Attempt {k}: Let me recompute the total cost of the apples and the oranges once more, just to be completely sure that nothing was missed. ",
        "Iteration {k}. The validation loss is still decreasing slowly, so we keep training with the same learning rate and the same batch size.\n",
        "{k}. The remaining balance is divided equally among the three friends, so each of them pays exactly the same amount as before.\n",
        "In year {k}, the population of the town grows by the same percentage as in the previous year, and the council builds another new school.\n",
        "Let's check case {k}: if the number of red marbles is {k}, then the number of blue marbles is twice that, which does not match the total given in the problem. ",
        "Page {k} of the report repeats the summary table, the same three recommendations for the board, and the same closing remarks.\n\n",
        "- Day {k}: wake up at 7, run five kilometres along the river, eat a big breakfast, and study for two hours before lunch.\n",
        "So after round {k}, Tom still has 12 apples, Mary still has 8 apples, and together they still have 20 apples, which is the same as before.\n",
    ]
    template = rng.choice(templates)
    start = rng.randint(1, 400)
    if rng.random() < 0.3:
        values = [rng.randint(10, 99) for _ in range(10_000)]
        return Loop(lambda k: template.format(k=values[k]), "unit with a random number each copy", False)
    return Loop(lambda k: template.format(k=start + k), "unit with an incrementing counter", False)


def loop_drift(rng: random.Random, prefix: str) -> Loop:
    if rng.random() < 0.6:
        template, slots = rng.choice(M.DRIFT_SLOTS)
        draws = random.Random(rng.random())
        return Loop(lambda k: template.format(**{name: draws.choice(options) for name, options in slots.items()}), "drifting phrase with slot words", False)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", prefix) if 4 <= ntok(s) <= 30][-5:] or rng.sample(GSM.sentences, 4)
    chosen = sentences[-rng.randint(2, min(5, len(sentences))) :] if len(sentences) >= 2 else sentences
    draws = random.Random(rng.random())
    return Loop(lambda k: draws.choice(chosen) + " ", f"{len(chosen)} sentences in random order", False)


def loop_chat(rng: random.Random) -> Loop:
    if rng.random() < 0.6:
        line = rng.choice(M.CHAT_LOOP_LINES)
        return Loop(lambda k: line, f"chat line {line[:40]!r}", True)
    tips = rng.sample(M.TIPS, rng.randint(2, 5))
    block = "".join(f"- {t}\n" for t in tips) + "\n"
    return Loop(lambda k: block, f"bullet list of {len(tips)} tips", True)


def loop_code(rng: random.Random, prefix: str) -> Loop:
    r = rng.random()
    if r < 0.45:
        line = rng.choice(M.CODE_LOOP_LINES)
        return Loop(lambda k: line, f"code line {line.strip()[:40]!r}", True)
    if r < 0.75:
        lines = [line + "\n" for line in prefix.rstrip("\n").split("\n")[-rng.randint(2, 6) :]]
        block = "".join(lines)
        return Loop(lambda k: block, f"last {len(lines)} code lines", True)
    template = rng.choice(["    self.layer{k} = nn.Linear(hidden_size, hidden_size, bias=False)  # hidden layer of the encoder\n",
                           "    assert compute_total(orders[{k}], discount=0.1, currency=\"EUR\") == expected_total  # same order again\n",
                           "        case {k}: return handle_default_case(request, response, context, /* retry */ false);\n"])
    start = rng.randint(0, 300)
    return Loop(lambda k: template.format(k=start + k), "code line with an incrementing index", False)


def render_loop(loop: Loop, tokens: int) -> str:
    """Copies of the loop unit holding at least ``tokens`` tokens (counted on the joined text:
    copies of a punctuation unit merge into longer pieces, as a tokenizer would merge them)."""
    out: list[str] = []
    k = 0
    while (have := ntok("".join(out))) < tokens:
        per_unit = max(1, ntok(loop.unit(k) * 8) // 8)
        for _ in range((tokens - have) // per_unit + 1):
            out.append(loop.unit(k))
            k += 1
    return "".join(out)


POSITIVE_CATEGORIES = ["single_token", "short_phrase", "long_period", "late_onset", "noisy_counter", "drifting", "chat_loop", "code_loop"]


def make_positive(rng: random.Random, category: str, index: int) -> dict[str, object]:
    stop = category not in {"late_onset"} and rng.random() < 0.15
    target = log_uniform(rng, max(MIN_TOKENS, 1400 if stop else 0), MAX_TOKENS)
    if category == "late_onset":
        target = max(target, 1600)
        onset_fraction = rng.uniform(0.7, 0.9)
    else:
        onset_fraction = rng.uniform(0.02, 0.6)
    onset_tokens = int(target * onset_fraction)
    if stop:
        onset_tokens = min(onset_tokens, target - 800)
    if category == "drifting":  # no fixed period: the CUSUM needs a few cycles to see it
        onset_tokens = min(onset_tokens, target - 400)
    kinds = ["code_repeated"] if category == "code_loop" else (["chat_answer"] if category == "chat_loop" else None)
    prefix = prefix_text(rng, onset_tokens, kinds, slack=1.0 if category == "late_onset" else 1.3)
    loop_budget = max(target - ntok(prefix), 160)

    kind = category
    if category == "late_onset":
        kind = rng.choice(["single_token", "short_phrase", "long_period", "chat_loop"])
    if kind == "single_token":
        loop = loop_single(rng)
    elif kind == "short_phrase":
        loop = loop_phrase(rng, prefix)
    elif kind == "long_period":
        loop = loop_paragraph(rng, prefix, max_period=max(8, min(400, loop_budget // 4)))
    elif kind == "noisy_counter":
        loop = loop_counter(rng)
    elif kind == "drifting":
        loop = loop_drift(rng, prefix)
    elif kind == "chat_loop":
        loop = loop_chat(rng)
    else:
        loop = loop_code(rng, prefix)
    if prefix and not prefix.endswith((" ", "\n")) and not loop.unit(0).startswith((" ", "\n")):
        prefix += " "

    # The least loop the suite claims to catch: 160 tokens and 3.5 copies of the unit; copies
    # that differ need more (see the module docstring); a loop that ends with "stop" 800+.
    unit_tokens = ntok(loop.unit(0))
    least = max(160, math.ceil(3.5 * unit_tokens))
    if kind == "noisy_counter" or (kind == "code_loop" and not loop.exact):
        least = max(320, math.ceil(3.5 * unit_tokens))
    elif kind == "drifting":
        least = 400
    if stop:
        least = max(least, 800 if loop.exact else 1000)
    total = max(target, ntok(prefix) + least)
    body = render_loop(loop, total - ntok(prefix) + 16)
    while ntok(prefix + body) <= total:  # pieces can merge where the prefix meets the loop
        body += render_loop(loop, 16)
    if stop:
        coda = rng.choice(["", "", "\n\nI hope this helps!", "\n```\n", "\n\nFinal answer: 42"]) if loop.exact or kind == "drifting" else ""
        text = (prefix + body).rstrip(" ") + coda
        finish = "stop"
    else:
        text = cut_tokens(prefix + body, total)
        finish = "length"
    assert ntok(text) >= MIN_TOKENS, category
    return {"id": f"pos-{category}-{index:03d}", "category": category, "text": text, "finish_reason": finish,
            "note": f"{loop.kind} from token {ntok(prefix)} of {ntok(text)}", "loop_start": len(prefix)}


def build() -> dict[str, list[dict[str, object]]]:
    rng = random.Random(SEED)
    negatives = [make_negative(rng, c, i) for c in NEGATIVES for i in range(N_NEGATIVE_PER_CATEGORY)]
    positives = [make_positive(rng, c, i) for c in POSITIVE_CATEGORIES for i in range(N_POSITIVE_PER_CATEGORY)]
    layout_rng = random.Random(f"{SEED}-layouts")  # a str seed is hashed with SHA-512: the same in every process
    negatives += [make_negative(layout_rng, c, i) for c in LAYOUT_NEGATIVES for i in range(N_NEGATIVE_PER_CATEGORY)]
    return {"negatives": negatives, "positives": positives}


def write_or_check(suites: dict[str, list[dict[str, object]]], *, check: bool, script: Path) -> None:
    """Write each suite to HERE/<name>.jsonl, or with ``check`` only compare (exit 1 if stale)."""
    stale = []
    for name, rows in suites.items():
        content = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        path = HERE / f"{name}.jsonl"
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != content:
                stale.append(name)
            continue
        path.write_text(content, encoding="utf-8")
        print(f"{name}: {len(rows)} samples, {sum(ntok(str(r['text'])) for r in rows)} tokens")
    if stale:
        sys.exit(f"stale suites, regenerate with python3 {script.relative_to(ROOT)}: {', '.join(stale)}")


if __name__ == "__main__":
    write_or_check(build(), check=sys.argv[1:] == ["--check"], script=Path(__file__).resolve())

"""Healthy 2-D numeric layouts for make_suites.py: matrices, zero-padded columns, grids and
bitmaps, hex dumps, CSV of mostly zeros.

Each of them holds long runs of one number token ("0 0 0 0 1 0 0 ...", "00 00 00 00") that are
data, not a loop: rows of one shape whose content varies from row to row (the 1 of an identity
matrix moves, a sparse matrix has its entries elsewhere in every row, a hex dump's offset
counts up). The print styles imitate the tools that print them (numpy, MATLAB, LaTeX, R,
Julia, xxd, hexdump -C, od, gdb), and every block sits in the prose or code fence of an
assistant's answer. Everything is drawn from the ``random.Random`` passed in, so the texts are
a pure function of the seed.

What the suite claims, and what it leaves out (:func:`in_scope` redraws a block that breaks
it): rows of at most ``ROW_TOKENS`` pieces, since a row holding more than the detector's
max_run (96) tokens of one number is a loop as far as anything before its end can tell (the
first row of a 100-column identity matrix); at most ``SAME_ROWS`` identical rows in a row,
and blocks of ones at most 4 rows high, since a row repeated with its line break is what a
loop is (a zero block of a sparse matrix, the zero padding of a firmware image as a C array,
five rows of ones printed as ``[1.0, 1.0, ...]``); and no matrix whose rows are drawn from
a handful of patterns in random order (a bare one-hot matrix of many rows), which recurs
exactly as a loop over a few sentences in random order does. The package docstring lists
these look-alikes.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Callable, Iterator

from evalkit.evals.detector._text import split_pieces

Blocks = Iterator[str]
Matrix = list[list[float]]
Prose = Iterator[str]

ROW_TOKENS = 90
SAME_ROWS = 20
BLOCK_TOKENS = 5000  # a block of a few thousand tokens at most: a text holds several


def drawn(make: Callable[[], str]) -> str:
    """``make()`` again until its block is in scope."""
    while not in_scope(text := make()):
        pass
    return text


def in_scope(text: str) -> bool:
    """Whether a layout block keeps to what the suite claims (see the module docstring)."""
    lines = text.split("\n")
    if max(len(split_pieces(line)) for line in lines) > ROW_TOKENS or len(split_pieces(text)) > BLOCK_TOKENS:
        return False
    same = longest = 1
    for before, line in zip(lines, lines[1:]):
        same = same + 1 if line == before and line.strip() else 1
        longest = max(longest, same)
    return longest <= SAME_ROWS


def log_int(rng: random.Random, lo: int, hi: int) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))


# ---------------------------------------------------------------------------------------------
# matrices


def identity(rng: random.Random, n: int, m: int) -> Matrix:
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def permutation(rng: random.Random, n: int, m: int) -> Matrix:
    order = rng.sample(range(n), n)
    return [[1 if j == order[i] else 0 for j in range(n)] for i in range(n)]


def shift(rng: random.Random, n: int, m: int) -> Matrix:
    """A Jordan block or a nilpotent shift: ones just above (or below) the diagonal."""
    lam, below = rng.choice([0, 0, 1, 2, 3]), rng.random() < 0.3
    return [[lam if i == j else (1 if (j == i - 1 if below else j == i + 1) else 0) for j in range(n)] for i in range(n)]


def diagonal(rng: random.Random, n: int, m: int) -> Matrix:
    d = [rng.choice([rng.randint(1, 9), rng.randint(-9, 99), round(rng.uniform(0.1, 9.9), 1)]) for _ in range(n)]
    return [[d[i] if i == j else 0 for j in range(n)] for i in range(n)]


def sparse(rng: random.Random, n: int, m: int) -> Matrix:
    density = rng.uniform(0.01, 0.15)
    if rng.random() < 0.5:
        def value() -> float:
            return rng.choice([1, 1, 1, 2, 3, -1, rng.randint(1, 99)])
    else:
        def value() -> float:
            return round(rng.uniform(-5, 5), rng.choice([1, 2]))
    return [[value() if rng.random() < density else 0 for _ in range(m)] for _ in range(n)]


def banded(rng: random.Random, n: int, m: int) -> Matrix:
    width = rng.choice([1, 1, 1, 2, 3])
    if rng.random() < 0.5:  # the finite-difference Laplacian and friends
        stencil = {0: 2, 1: -1, -1: -1} if width == 1 else {0: 6, 1: -4, -1: -4, 2: 1, -2: 1}
        return [[stencil.get(j - i, 0) for j in range(n)] for i in range(n)]
    return [[rng.randint(1, 9) if abs(i - j) <= width else 0 for j in range(n)] for i in range(n)]


def block_diagonal(rng: random.Random, n: int, m: int) -> Matrix:
    ones = rng.random() < 0.5
    sizes, total = [], 0
    while total < n:  # blocks of ones at most 4 high: see the module docstring
        sizes.append(min(n - total, rng.randint(1, 4 if ones else 6)))
        total += sizes[-1]
    out = [[0] * n for _ in range(n)]
    start = 0
    for size in sizes:
        for i in range(start, start + size):
            for j in range(start, start + size):
                out[i][j] = 1 if ones else rng.randint(1, 9)
        start += size
    return out


def triangular(rng: random.Random, n: int, m: int) -> Matrix:
    upper, ones = rng.random() < 0.5, rng.random() < 0.6
    return [[(1 if ones else rng.randint(1, 9)) if (j >= i if upper else j <= i) else 0 for j in range(n)] for i in range(n)]


def adjacency(rng: random.Random, n: int, m: int) -> Matrix:
    p = min(0.5, rng.uniform(1.0, 4.0) / n)
    out = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < p:
                out[i][j] = out[j][i] = 1
    return out


def confusion(rng: random.Random, n: int, m: int) -> Matrix:
    out = [[0] * n for _ in range(n)]
    for i in range(n):
        out[i][i] = rng.randint(20, 900)
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
            out[i][rng.randrange(n)] += rng.randint(1, 30)
    return out


ONE_PER_ROW: list[tuple[str, Callable[[random.Random, int, int], Matrix]]] = [
    ("identity", identity), ("permutation", permutation), ("shift", shift), ("diagonal", diagonal)]
SPARSE: list[tuple[str, Callable[[random.Random, int, int], Matrix]]] = [
    ("sparse", sparse), ("banded", banded), ("block diagonal", block_diagonal), ("triangular", triangular),
    ("adjacency", adjacency), ("confusion", confusion)]


def _number(v: float, floats: str, decimals: int = 0) -> str:
    """``floats``: "int" (values as they are), "numpy" (``1.``, or ``4.7``/``95. `` padded to
    ``decimals`` as numpy aligns a float array), "python" (``1.0``)."""
    if floats == "int":
        return str(v)
    if floats == "numpy":
        fixed = f"{float(v):.{decimals}f}"
        trimmed = fixed.rstrip("0") if decimals else fixed + "."
        return trimmed + " " * (len(fixed) - len(trimmed)) if decimals else trimmed
    return repr(float(v))


def _wrap(items: list[str], width: int, first: str, cont: str, sep: str, end: str) -> str:
    """numpy's line wrapping: items joined by ``sep``, continuation lines indented."""
    lines, line = [], first
    for k, item in enumerate(items):
        piece = item + (sep if k < len(items) - 1 else end)
        if len(line) + len(piece.rstrip()) > width and line.strip():
            lines.append(line.rstrip())
            line = cont
        line += piece
    lines.append(line)
    return "\n".join(lines)


def fmt_numpy(rng: random.Random, a: Matrix, name: str) -> str:
    """``print(a)`` or ``repr(a)`` of a numpy array: wrapped at 75 characters, summarised with
    ``...`` beyond 1000 elements, columns right-aligned to the widest entry."""
    ints = all(float(v).is_integer() for row in a for v in row)
    floats = rng.choice(["int", "numpy"]) if ints else "numpy"
    decimals = 0 if ints else max(len(repr(float(v)).split(".")[1]) for row in a for v in row if not float(v).is_integer())
    cells = [[_number(v, floats, decimals) for v in row] for row in a]
    summarise = len(a) * len(a[0]) > 1000
    if summarise:
        rows = cells[:3] + [None] + cells[-3:]
        cells = [None if r is None else r[:3] + ["..."] + r[-3:] for r in rows]  # type: ignore[index]
    width = max(len(c) for r in cells if r is not None for c in r if c != "...")
    as_repr = rng.random() < 0.5
    prefix = "array(" if as_repr else ""
    sep = ", " if as_repr else " "
    out = []
    for i, row in enumerate(cells):
        if row is None:
            out.append(" " * (len(prefix) + 1) + "...," if as_repr else " ...")
            continue
        first = (prefix + "[[" if i == 0 else " " * len(prefix) + " [")
        last = i == len(cells) - 1
        end = "]])" if last and as_repr else ("]]" if last else ("]," if as_repr else "]"))
        items = [c.rjust(width) if c != "..." else c for c in row]
        out.append(_wrap(items, 75, first, " " * (len(first)), sep, end))
    return "\n".join(out) + "\n"


def fmt_plain(rng: random.Random, a: Matrix, name: str) -> str:
    sep = rng.choice([" ", " ", "  ", "\t"])
    aligned = rng.random() < 0.4
    cells = [[str(v) for v in row] for row in a]
    width = max(len(c) for r in cells for c in r)
    return "".join(sep.join(c.rjust(width) if aligned else c for c in r) + "\n" for r in cells)


def fmt_csv(rng: random.Random, a: Matrix, name: str) -> str:
    sep = rng.choice([",", ",", ";", ", "])
    return "".join(sep.join(str(v) for v in r) + "\n" for r in a)


def fmt_python(rng: random.Random, a: Matrix, name: str) -> str:
    """A list of lists: as a literal in code (one row per line), or as ``print`` shows it."""
    floats = rng.choice(["int", "int", "python"])
    rows = ["[" + ", ".join(_number(v, floats) for v in r) + "]" for r in a]
    if rng.random() < 0.3:
        return f"{name} = [\n" + "".join(f"    {r},\n" for r in rows) + "]\n"
    if rng.random() < 0.3 and len(a) * len(a[0]) <= 400:
        return "[" + ", ".join(rows) + "]\n"
    return "[" + ",\n ".join(rows) + "]\n"


def fmt_matlab(rng: random.Random, a: Matrix, name: str) -> str:
    """MATLAB's display: ``name =``, columns of width 6 (10 when not all integers, with exact
    zeros shown as 0), split into "Columns i through j" blocks that fit 80 characters."""
    ints = all(float(v).is_integer() for row in a for v in row)
    width = 6 if ints else 10
    cell = (lambda v: f"{int(v):{width}d}") if ints else (lambda v: f"{'0':>{width}}" if v == 0 else f"{v:{width}.4f}")
    per_block = max(1, 78 // width)
    cols = len(a[0])
    out = [f"{name} =\n"]
    for start in range(0, cols, per_block):
        stop = min(cols, start + per_block)
        if cols > per_block:
            out.append(f"  Columns {start + 1} through {stop}\n" if stop - start > 1 else f"  Column {start + 1}\n")
        out.append("\n" + "".join("".join(cell(v) for v in r[start:stop]) + "\n" for r in a))
    return "\n".join(out) + "\n"


def fmt_latex(rng: random.Random, a: Matrix, name: str) -> str:
    env = rng.choice(["bmatrix", "pmatrix", "array"])
    head = f"\\begin{{{env}}}" + ("{" + "c" * len(a[0]) + "}" if env == "array" else "")
    rows = [" & ".join(str(v) for v in r) for r in a]
    body = " \\\\\n".join(rows)
    return f"$$\n{name} = " + ("\\left(" if env == "array" else "") + head + "\n" + body + f"\n\\end{{{env}}}" + ("\\right)" if env == "array" else "") + "\n$$\n"


def fmt_mathematica(rng: random.Random, a: Matrix, name: str) -> str:
    return "{" + ", ".join("{" + ", ".join(str(v) for v in r) + "}" for r in a) + "}\n"


def fmt_julia(rng: random.Random, a: Matrix, name: str) -> str:
    floats = rng.choice(["int", "python"])
    cells = [[_number(v, floats) for v in r] for r in a]
    width = max(len(c) for r in cells for c in r)
    kind = "Int64" if floats == "int" else "Float64"
    return f"{len(a)}×{len(a[0])} Matrix{{{kind}}}:\n" + "".join(" " + "  ".join(c.rjust(width) for c in r) + "\n" for r in cells)


def fmt_r(rng: random.Random, a: Matrix, name: str) -> str:
    cells = [[str(v) for v in r] for r in a]
    label = [f"[{i + 1},]" for i in range(len(a))]
    lw = max(len(x) for x in label)
    width = max(max(len(c) for r in cells for c in r), len(f"[,{len(a[0])}]"))
    head = " " * lw + "".join(f" {f'[,{j + 1}]':>{width}}" for j in range(len(a[0])))
    return head + "\n" + "".join(label[i].ljust(lw) + "".join(f" {c:>{width}}" for c in r) + "\n" for i, r in enumerate(cells))


def fmt_labeled(rng: random.Random, a: Matrix, name: str) -> str:
    """Rows and columns named, as a graph's adjacency matrix or a confusion matrix is shown."""
    n = len(a[0])
    pool = rng.choice([list(string.ascii_uppercase), [f"v{i}" for i in range(1, n + 1)], [f"n{i:02d}" for i in range(n)],
                       [c.lower()[:3] for c in ["cat", "dog", "car", "bus", "owl", "fox", "ant", "bee", "cow", "elk", "yak", "emu"]]])
    names = (pool * (n // len(pool) + 1))[:n] if len(pool) >= n else [f"{p}{k}" for k in range(n // len(pool) + 1) for p in pool][:n]
    rows = [f"r{i}" for i in range(len(a))] if len(a) != n else names
    width = max(len(x) for x in names + [str(v) for r in a for v in r])
    lw = max(len(x) for x in rows)
    if rng.random() < 0.5:
        head = " " * lw + " | " + " ".join(x.rjust(width) for x in names)
        rule = "-" * lw + "-+-" + "-" * len(head[lw + 3 :])
        return head + "\n" + rule + "\n" + "".join(rows[i].ljust(lw) + " | " + " ".join(str(v).rjust(width) for v in r) + "\n" for i, r in enumerate(a))
    head = "| |" + "|".join(f" {x} " for x in names) + "|"
    return head + "\n|" + "---|" * (n + 1) + "\n" + "".join(f"| **{rows[i]}** |" + "|".join(f" {v} " for v in r) + "|\n" for i, r in enumerate(a))


STYLES: list[tuple[str, Callable[[random.Random, Matrix, str], str]]] = [
    ("numpy", fmt_numpy), ("plain", fmt_plain), ("csv", fmt_csv), ("python", fmt_python), ("matlab", fmt_matlab),
    ("latex", fmt_latex), ("mathematica", fmt_mathematica), ("julia", fmt_julia), ("r", fmt_r), ("labeled", fmt_labeled)]


def _size(rng: random.Random, style: str) -> int:
    hi = {"labeled": 40, "latex": 40, "mathematica": 30}.get(style, 100)
    return log_int(rng, 3, hi)


def _matrix_code(rng: random.Random, kind: str, n: int, m: int, name: str) -> str:
    calls = {"identity": f"np.eye({n}, dtype=int)", "permutation": f"np.eye({n}, dtype=int)[rng.permutation({n})]",
             "one-hot": f"np.eye({m}, dtype=int)[labels]", "diagonal": "np.diag(d)", "shift": f"np.eye({n}, k=1, dtype=int)",
             "sparse": f"sparse.random({n}, {m}, density=0.05).toarray()", "banded": f"diags([-1, 2, -1], [-1, 0, 1], shape=({n}, {n})).toarray()",
             "block diagonal": "block_diag(*blocks)", "triangular": f"np.tril(np.ones(({n}, {n}), dtype=int))",
             "adjacency": "nx.to_numpy_array(G, dtype=int)", "confusion": "confusion_matrix(y_true, y_pred)"}
    return f"```python\n{name} = {calls[kind]}\nprint({name})\n```\n\nOutput:\n\n"


def matrix_blocks(rng: random.Random, prose: Prose, kinds: list[tuple[str, Callable[[random.Random, int, int], Matrix]]]) -> Blocks:
    """Matrices of the given kinds in every print style, in an answer's prose and code fences."""
    while True:
        kind, make = rng.choice(kinds)
        style, show = rng.choice(STYLES)
        n = _size(rng, style)
        m = n if kind != "sparse" else max(2, log_int(rng, 2, 100 if style != "labeled" else 40))
        name = rng.choice(["A", "M", "P", "I", "X", "W", "adj", "cm", "mask"])
        a = make(rng, n, m)
        text = show(rng, a, name)
        while not in_scope(text):  # too wide, too long or too uniform: a smaller one
            n, m = max(3, n * 4 // 5), max(2, m * 4 // 5)
            a = make(rng, n, m)
            text = show(rng, a, name)
        shape = f"{len(a)}×{len(a[0])}"
        intro = rng.choice([f"Here is the {shape} {kind} matrix:", f"The {kind} matrix ({shape}) looks like this:",
                            f"For n = {len(a)} the {kind} matrix is", f"Printing `{name}` gives:", "Sure! Here it is:",
                            f"Below is {name}, a {shape} {kind} matrix."])
        r = rng.random()
        if style == "latex":
            yield f"{intro}\n\n{text}\n"
        elif r < 0.3 and style == "numpy":
            yield intro + "\n\n" + _matrix_code(rng, kind, len(a), len(a[0]), name) + "```\n" + text + "```\n\n"
        elif r < 0.75:
            yield f"{intro}\n\n```{rng.choice(['', 'text', ''])}\n{text}```\n\n"
        else:
            yield f"{intro}\n\n{text}\n"
        if rng.random() < 0.6:
            yield next(prose)


# ---------------------------------------------------------------------------------------------
# zero-padded numeric columns


def zero_padded_blocks(rng: random.Random, prose: Prose, words: list[str]) -> Blocks:
    """Fixed-width records, nm symbol tables, binary tables, ledgers: columns of zero-padded
    numbers whose leading zeros repeat in every row while the digits at the end change."""

    def records() -> str:
        fields = [(rng.choice(["ACCT", "ID", "CUST", "ITEM"]), rng.randint(8, 12)), ("AMT", rng.randint(9, 13)), ("QTY", rng.randint(4, 6))]
        out = ["".join(f"{name:<{w + 1}}" for name, w in fields) + "DATE"]
        acct = rng.randint(1, 50_000)
        for _ in range(rng.randint(15, 90)):
            acct += rng.randint(1, 400)
            vals = [acct, rng.choice([0, 0, rng.randint(1, 99_999), rng.randint(100, 9_999_999)]), rng.choice([0, 1, 1, 2, rng.randint(1, 300)])]
            out.append("".join(f"{v:0{w}d} " for v, (_, w) in zip(vals, fields)) + f"2024{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}")
        return "```\n" + "\n".join(out) + "\n```\n"

    def packed() -> str:  # COBOL-style records: fields run together without separators
        out = []
        for _ in range(rng.randint(15, 70)):
            out.append(f"{rng.randint(1, 999_999):010d}{rng.choice([0, 0, rng.randint(1, 999_999)]):012d}{rng.randint(0, 99):03d}{rng.choice(['C', 'D'])}{rng.randint(0, 9999):06d}")
        return "Raw records from the batch file:\n\n```\n" + "\n".join(out) + "\n```\n"

    def nm() -> str:
        address = rng.choice([0x401000, 0x1000, 0x0, 0x600000])
        out = []
        for _ in range(rng.randint(15, 80)):
            address += rng.choice([0x10, 0x20, 0x8, 0x4, 0x30, 0x1a0, rng.randint(1, 4000)])
            out.append(f"{address:016x} {rng.choice('TTTtDdBbRr')} {rng.choice(['_', ''])}{rng.choice(words)}_{rng.choice(words)}")
        return "$ nm -n build/app\n" + "\n".join(out) + "\n"

    def binary() -> str:
        bits = rng.choice([8, 8, 16, 4])
        step = rng.choice([1, 1, 3, 7]) if bits == 4 else rng.choice([1, 1, 3, 7, 16])
        rows = min(rng.randint(12, 70), (1 << bits) // step)
        start = rng.randint(0, (1 << bits) - rows * step)
        out = [f"{'dec':>5}  {'hex':>{bits // 4 + 2}}  binary"]
        for k in range(rows):
            v = start + k * step
            b = f"{v:0{bits}b}"
            grouped = " ".join(b[i : i + 4] for i in range(0, bits, 4)) if rng.random() < 0.5 else b
            out.append(f"{v:>5}  0x{v:0{bits // 4}X}  {grouped}")
        return "Here is the table:\n\n```\n" + "\n".join(out) + "\n```\n"

    def ledger() -> str:
        out = ["  DATE      REF       DEBIT       CREDIT     BALANCE"]
        bal = rng.uniform(0, 50_000)
        ref = rng.randint(1, 9000)
        for _ in range(rng.randint(15, 70)):
            ref += rng.randint(1, 9)
            d = rng.choice([0.0, 0.0, rng.uniform(1, 3000)])
            c = 0.0 if d else rng.uniform(1, 5000)
            bal += c - d
            out.append(f"  2024{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}  {ref:06d}  {d:010.2f}  {c:010.2f}  {bal:010.2f}")
        return "```\n" + "\n".join(out) + "\n```\n"

    def timings() -> str:
        t = 0.0
        out = ["| # | start        | duration     | step |", "|---|---|---|---|"]
        for k in range(1, rng.randint(12, 60)):
            d = rng.choice([rng.uniform(0, 0.9), rng.uniform(0, 0.05), rng.uniform(1, 59)])
            out.append(f"| {k:03d} | {int(t // 3600):02d}:{int(t // 60 % 60):02d}:{t % 60:06.3f} | 00:00:{d:06.3f} | {rng.choice(words)} |")
            t += d
        return "\n".join(out) + "\n"

    def frames() -> str:
        start = rng.randint(0, 500)
        ext = rng.choice(["png", "exr", "jpg", "tif"])
        out = [f"-rw-r--r-- 1 render render {rng.randint(100_000, 9_000_000):>8} Mar {rng.randint(1, 28):2d} 14:{k % 60:02d} frame_{start + k:06d}.{ext}"
               for k in range(rng.randint(12, 80))]
        return "$ ls -l renders/\n" + "\n".join(out) + "\n"

    makers = [records, packed, nm, binary, ledger, timings, frames]
    while True:
        yield rng.choice(["Here you go:\n\n", "The output:\n\n", "", "This is what the file contains:\n\n"]) + drawn(rng.choice(makers)) + "\n"
        if rng.random() < 0.6:
            yield next(prose)


# ---------------------------------------------------------------------------------------------
# grids, boards and bitmaps


def _shape_mask(rng: random.Random, w: int, h: int) -> list[list[bool]]:
    """A small picture: ellipses, rectangles and lines drawn on an empty canvas."""
    grid = [[False] * w for _ in range(h)]
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["ellipse", "rect", "line", "ring"])
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(1.5, w / 2.5), rng.uniform(1.5, h / 2.5)
        for y in range(h):
            for x in range(w):
                d = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2
                if (kind == "ellipse" and d <= 1) or (kind == "ring" and 0.6 <= d <= 1) or (kind == "rect" and abs(x - cx) <= rx and abs(y - cy) <= ry / 2) \
                        or (kind == "line" and abs((y - cy) - (x - cx) * ry / rx) < 0.6):
                    grid[y][x] = True
    return grid


def grid_blocks(rng: random.Random, prose: Prose) -> Blocks:
    """Bitmaps of 0/1, ./# and spaced digits; chess, go, sudoku, minesweeper, life, 2048 and
    battleship boards; mazes as 0/1 grids and heat maps that are zero almost everywhere."""

    def bitmap() -> str:
        w, h = rng.choice([8, 8, 16, 16, 24, 32, 40, 48, 64]), rng.randint(8, 32)
        mask = _shape_mask(rng, w, h)
        on, off, sep = rng.choice([("1", "0", ""), ("1", "0", " "), ("#", ".", ""), ("#", ".", " "), ("█", " ", ""), ("*", ".", ""), ("X", "-", "")])
        rows = [sep.join(on if c else off for c in row).rstrip() if off == " " else sep.join(on if c else off for c in row) for row in mask]
        return f"A {w}×{h} bitmap of the shape:\n\n```\n" + "\n".join(rows) + "\n```\n"

    def glyphs() -> str:
        out = []
        for ch in rng.sample(string.ascii_uppercase + string.digits, rng.randint(2, 6)):
            mask = _shape_mask(rng, 8, 8)
            style = rng.choice(["bits", "hex", "dots"])
            if style == "hex":
                out.append(f"    /* '{ch}' */ " + ", ".join(f"0x{int(''.join('1' if c else '0' for c in row), 2):02X}" for row in mask) + ",")
            elif style == "bits":
                out.append(f"// '{ch}'\n" + "\n".join("0b" + "".join("1" if c else "0" for c in row) + "," for row in mask))
            else:
                out.append(f"'{ch}':\n" + "\n".join("".join("#" if c else "." for c in row) for row in mask))
        return "Font data:\n\n```c\n" + "\n".join(out) + "\n```\n"

    def chess() -> str:
        board = [["."] * 8 for _ in range(8)]
        for piece in rng.sample("KQRRBBNNPPPPPPPPkqrrbbnnpppppppp", rng.randint(4, 24)):
            board[rng.randrange(8)][rng.randrange(8)] = piece
        ranks = "\n".join(f"{8 - i} " + " ".join(r) for i, r in enumerate(board))
        return "Position after the move:\n\n```\n" + ranks + "\n  a b c d e f g h\n```\n"

    def go() -> str:
        size = rng.choice([9, 13, 19])
        board = [["."] * size for _ in range(size)]
        for _ in range(rng.randint(3, size * 3)):
            board[rng.randrange(size)][rng.randrange(size)] = rng.choice("XO")
        return f"The {size}×{size} board:\n\n```\n" + "\n".join(" ".join(r) for r in board) + "\n```\n"

    def sudoku() -> str:
        blank = rng.choice(["0", ".", "_"])
        rows = []
        for i in range(9):
            cells = [str(rng.randint(1, 9)) if rng.random() < 0.35 else blank for _ in range(9)]
            rows.append(" ".join(cells[0:3]) + " | " + " ".join(cells[3:6]) + " | " + " ".join(cells[6:9]))
            if i in (2, 5):
                rows.append("------+-------+------")
        return "The puzzle (blanks as " + blank + "):\n\n```\n" + "\n".join(rows) + "\n```\n"

    def minesweeper() -> str:
        w, h = rng.randint(8, 30), rng.randint(8, 16)
        mines = {(rng.randrange(h), rng.randrange(w)) for _ in range(rng.randint(3, w * h // 8))}
        rows = []
        for y in range(h):
            row = []
            for x in range(w):
                k = sum((y + dy, x + dx) in mines for dy in (-1, 0, 1) for dx in (-1, 0, 1))
                row.append("*" if (y, x) in mines else str(k))
            rows.append(" ".join(row))
        return "Revealed board:\n\n```\n" + "\n".join(rows) + "\n```\n"

    def life() -> str:
        w, h = rng.randint(10, 40), rng.randint(6, 16)
        cells = {(rng.randrange(h), rng.randrange(w)) for _ in range(rng.randint(5, w * h // 6))}
        alive, dead = rng.choice([("#", "."), ("O", "."), ("1", "0"), ("█", "·")])
        out = []
        for gen in range(rng.randint(2, 5)):
            out.append(f"Generation {gen}:\n" + "\n".join("".join(alive if (y, x) in cells else dead for x in range(w)) for y in range(h)))
            cells = {(y, x) for y in range(h) for x in range(w)
                     if sum((y + dy, x + dx) in cells for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx) in ((2, 3) if (y, x) in cells else (3,))}
        return "```\n" + "\n\n".join(out) + "\n```\n"

    def board_2048() -> str:
        rows = [" ".join(f"{rng.choice([0, 0, 0, 2, 2, 4, 8, 16, 32, 64, 128]):>4}" for _ in range(4)) for _ in range(4)]
        return "Board:\n\n```\n" + "\n".join(rows) + "\n```\n"

    def battleship() -> str:
        n = 10
        grid = [["~"] * n for _ in range(n)]
        for length in (5, 4, 3, 3, 2):
            y, x = rng.randrange(n), rng.randrange(n - length)
            for k in range(length):
                grid[y][x + k] = "S"
        for _ in range(rng.randint(3, 20)):
            grid[rng.randrange(n)][rng.randrange(n)] = rng.choice("XO")
        return "   " + " ".join("ABCDEFGHIJ") + "\n" + "\n".join(f"{i + 1:>2} " + " ".join(r) for i, r in enumerate(grid)) + "\n"

    def maze() -> str:
        w, h = rng.choice([11, 15, 21, 31]), rng.choice([7, 11, 15, 21])
        grid = [[1] * w for _ in range(h)]
        stack, seen = [(1, 1)], {(1, 1)}
        grid[1][1] = 0
        while stack:
            y, x = stack[-1]
            options = [(y + dy, x + dx, dy, dx) for dy, dx in ((0, 2), (2, 0), (0, -2), (-2, 0)) if 0 < y + dy < h - 1 and 0 < x + dx < w - 1 and (y + dy, x + dx) not in seen]
            if not options:
                stack.pop()
                continue
            ny, nx, dy, dx = rng.choice(options)
            grid[y + dy // 2][x + dx // 2] = grid[ny][nx] = 0
            seen.add((ny, nx))
            stack.append((ny, nx))
        sep = rng.choice([" ", ", ", ""])
        return "The maze as a grid (1 = wall, 0 = open):\n\n```\n" + "\n".join(sep.join(str(c) for c in r) for r in grid) + "\n```\n"

    def heatmap() -> str:
        w, h = rng.randint(10, 60), rng.randint(6, 24)
        spots = [(rng.uniform(0, h), rng.uniform(0, w), rng.uniform(1, 4)) for _ in range(rng.randint(1, 3))]
        rows = []
        for y in range(h):
            row = [min(9, int(sum(9 * math.exp(-((y - sy) ** 2 + (x - sx) ** 2) / (2 * s * s)) for sy, sx, s in spots))) for x in range(w)]
            rows.append(" ".join(str(v) for v in row))
        return "Counts per cell:\n\n```\n" + "\n".join(rows) + "\n```\n"

    makers = [bitmap, bitmap, glyphs, chess, go, sudoku, minesweeper, life, board_2048, battleship, maze, heatmap]
    while True:
        yield rng.choice(["", "Here is the picture.\n\n", "As text:\n\n", "Sure.\n\n"]) + drawn(rng.choice(makers)) + "\n"
        if rng.random() < 0.5:
            yield next(prose)


# ---------------------------------------------------------------------------------------------
# hex dumps


def _file_bytes(rng: random.Random, size: int, sentences: Prose) -> bytes:
    """A binary file: a header, zero padding, text, small integers, random data, 0xFF fill."""
    magic = rng.choice([b"\x7fELF\x02\x01\x01\x00", b"\x89PNG\r\n\x1a\n", b"PK\x03\x04\x14\x00\x00\x00", b"MZ\x90\x00\x03\x00\x00\x00", b"\x00\x00\x00\x18ftypmp42"])
    out = bytearray(magic)
    while len(out) < size:
        kind = rng.choice(["zeros", "zeros", "zeros", "text", "ints", "random", "ff"])
        if kind == "zeros":
            out += bytes(rng.choice([4, 8, 16, 24, 48, 64, 128, 256, 512]))
        elif kind == "text":
            out += next(sentences).encode("ascii", "replace")[: rng.randint(8, 120)] + b"\x00"
        elif kind == "ints":
            width = rng.choice([2, 4, 8])
            out += b"".join(rng.randint(0, min(256**width - 1, rng.choice([16, 300, 70_000]))).to_bytes(width, "little") for _ in range(rng.randint(4, 24)))
        elif kind == "random":
            out += bytes(rng.randrange(256) for _ in range(rng.randint(8, 96)))
        else:
            out += b"\xff" * rng.choice([16, 32, 64, 128])
    return bytes(out[:size])


def _printable(b: int) -> str:
    return chr(b) if 32 <= b < 127 else "."


def hex_blocks(rng: random.Random, prose: Prose, sentences: Prose) -> Blocks:
    """xxd, hexdump -C (with and without squeezing repeated lines), od, C arrays (xxd -i),
    gdb memory dumps and Intel HEX records of files that hold long runs of zero bytes."""

    def xxd(data: bytes, base: int) -> str:
        lines = []
        for i in range(0, len(data), 16):
            row = data[i : i + 16]
            hexes = " ".join(row[j : j + 2].hex() for j in range(0, len(row), 2))
            lines.append(f"{base + i:08x}: {hexes:<39}  {''.join(_printable(b) for b in row)}")
        return "$ xxd firmware.bin\n" + "\n".join(lines) + "\n"

    def hexdump(data: bytes, base: int) -> str:
        squeeze = rng.random() < 0.5
        lines, previous, starred = [], None, False
        for i in range(0, len(data), 16):
            row = data[i : i + 16]
            if squeeze and row == previous:
                if not starred:
                    lines.append("*")
                    starred = True
                continue
            previous, starred = row, False
            left = " ".join(f"{b:02x}" for b in row[:8])
            right = " ".join(f"{b:02x}" for b in row[8:])
            lines.append(f"{base + i:08x}  {left:<23}  {right:<23}  |{''.join(_printable(b) for b in row)}|")
        lines.append(f"{base + len(data):08x}")
        return f"$ hexdump -C{'' if squeeze else 'v'} dump.bin\n" + "\n".join(lines) + "\n"

    def od(data: bytes, base: int) -> str:
        lines = [f"{base + i:07o} " + " ".join(f"{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16)]
        return "$ od -A o -t x1 -v blob\n" + "\n".join(lines) + "\n"

    def c_array(data: bytes, base: int) -> str:
        name = rng.choice(["firmware_bin", "font_data", "boot_img", "payload"])
        per = rng.choice([8, 12, 16])
        lines = ["  " + ", ".join(f"0x{b:02x}" for b in data[i : i + per]) + "," for i in range(0, len(data), per)]
        return f"```c\nunsigned char {name}[] = {{\n" + "\n".join(lines) + f"\n}};\nunsigned int {name}_len = {len(data)};\n```\n"

    def gdb(data: bytes, base: int) -> str:
        address = rng.choice([0x7FFFFFFFE000, 0x555555558000, 0x20000000]) + base
        words = [int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data) - 3, 4)]
        lines = [f"0x{address + 16 * k:x}:\t" + "\t".join(f"0x{w:08x}" for w in words[4 * k : 4 * k + 4]) for k in range(len(words) // 4)]
        return f"(gdb) x/{len(words)}xw $sp\n" + "\n".join(lines) + "\n"

    def intel_hex(data: bytes, base: int) -> str:
        lines = []
        for i in range(0, len(data), 16):
            row = data[i : i + 16]
            address = (base + i) & 0xFFFF
            record = bytes([len(row), address >> 8, address & 0xFF, 0]) + row
            lines.append(":" + record.hex().upper() + f"{(-sum(record)) & 0xFF:02X}")
        return "```\n" + "\n".join(lines) + "\n:00000001FF\n```\n"

    makers = [xxd, xxd, hexdump, hexdump, od, c_array, gdb, intel_hex]
    def dump() -> str:
        data = _file_bytes(rng, rng.choice([64, 128, 256, 512, 1024, 2048]), sentences)
        base = rng.choice([0, 0, 0x400, 0x1000, rng.randrange(0, 1 << 20, 16)])
        show = rng.choice(makers)
        return show(data, base) if show is c_array or show is intel_hex else "```\n" + show(data, base) + "```\n"

    while True:
        yield rng.choice(["Here is the dump:\n\n", "The first bytes of the file:\n\n", "", "Memory around the crash:\n\n"]) + drawn(dump) + "\n"
        if rng.random() < 0.5:
            yield next(prose)


# ---------------------------------------------------------------------------------------------
# CSV of mostly zeros


def sparse_csv_blocks(rng: random.Random, prose: Prose, words: list[str], people: Callable[[], str]) -> Blocks:
    """One-hot features, bag-of-words counts, event counts per day and hour, stock per store:
    comma, semicolon or tab separated, most fields 0."""

    def table() -> str:
        sep = rng.choice([",", ",", ",", ";", "\t"])
        kind = rng.choice(["onehot", "bow", "events", "stock", "hourly"])
        rows = rng.randint(10, 120)
        if kind == "onehot":
            groups = [(g, rng.sample(words, rng.randint(2, 6))) for g in rng.sample(["color", "size", "city", "plan", "device", "source"], rng.randint(2, 4))]
            head = ["id"] + [f"{g}_{v}" for g, vs in groups for v in vs]
            body = []
            start = rng.randint(1, 9000)
            for k in range(rows):
                flags = [str(int(v == pick)) for g, vs in groups for pick in [rng.choice(vs)] for v in vs]
                body.append([str(start + k)] + flags)
        elif kind == "bow":
            vocab = rng.sample(words, rng.randint(8, 40))
            head = ["doc"] + vocab
            body = [[f"d{k:03d}"] + [str(rng.choice([1, 1, 2, 3])) if rng.random() < 0.08 else "0" for _ in vocab] for k in range(rows)]
        elif kind == "events":
            head = ["date"] + rng.sample(["errors", "warnings", "crashes", "timeouts", "retries", "refunds", "signups", "alerts", "pages", "rollbacks"], rng.randint(3, 9))
            day = rng.randint(0, 300)
            body = [[f"2024-{1 + (day + k) // 28 % 12:02d}-{1 + (day + k) % 28:02d}"] + [str(rng.randint(1, 12)) if rng.random() < 0.1 else "0" for _ in head[1:]] for k in range(rows)]
        elif kind == "stock":
            stores = [f"store_{c}" for c in rng.sample(["north", "south", "east", "west", "center", "airport", "mall", "online", "depot", "harbor"], rng.randint(3, 10))]
            head = ["sku", "product"] + stores
            body = [[f"SKU-{rng.randint(10000, 99999)}", rng.choice(words)] + [str(rng.randint(1, 40)) if rng.random() < 0.15 else "0" for _ in stores] for _ in range(rows)]
        else:
            head = ["sensor", "date"] + [f"h{h:02d}" for h in range(24)]
            sensor = rng.randint(1, 90)
            body = [[f"S{sensor + k // 7:03d}", f"2024-06-{1 + k % 28:02d}"] + [str(rng.randint(1, 5)) if rng.random() < 0.06 else "0" for _ in range(24)] for k in range(rows)]
        text = sep.join(head) + "\n" + "".join(sep.join(r) + "\n" for r in body)
        if rng.random() < 0.3:
            return text
        return f"```{rng.choice(['csv', '', 'text'])}\n{text}```\n"

    while True:
        yield rng.choice(["Here is the data as CSV:\n\n", "Exported table:\n\n", "", f"The file {rng.choice(words)}.csv, as requested by {people()}:\n\n"]) + drawn(table) + "\n"
        if rng.random() < 0.6:
            yield next(prose)

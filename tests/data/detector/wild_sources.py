"""Collect the real texts the "wild" suites are built from, into wild_sources.jsonl.

    python3 tests/data/detector/wild_sources.py

The stutter and soup rules were tuned on texts the project wrote itself (garbled.py); issue 36
measured them on text written apart from it and found misses and false alarms. This script
copies such text from a Debian 12 machine, once, so that wild.py can build the suites from a
committed file on any machine (its output is then a pure function of that file and a seed):

* licence texts from /usr/share/common-licenses (base-files 12.4+deb12u11), GPL-1, LGPL-2 and
  LGPL-2.1 with their form-feed page breaks;
* source files with form feeds: CPython 3.11's ``email`` package (/usr/lib/python3.11) and C
  headers from /usr/include (glibc's argp.h and regex.h, libgcrypt, nettle);
* gettext catalogues (.mo files under /usr/share/locale, from coreutils, glib, GTK,
  Linux-PAM, systemd, xkeyboard-config, iso-codes and others, in 48 languages), written back
  as .po text by gettext 0.21's ``msgunfmt`` (sorted by msgid, as the .mo holds them; UTF-8 ones only);
* translated manual pages (/usr/share/man/LANG, man-db 2.11.2 and others) as ``man``
  renders them at 80 columns: prose in 21 languages.

Each row: ``{"id", "kind", "lang", "source", "text"}``; ``source`` is the path the text came
from and the Debian package that ships it. Texts are cut at 12,000 characters.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "wild_sources.jsonl"
CAP = 12_000

LICENCES = ["GPL-1", "LGPL-2", "LGPL-2.1", "GPL-2", "GPL-3", "LGPL-3", "Apache-2.0", "MPL-1.1", "MPL-2.0", "Artistic",
            "GFDL-1.2", "GFDL-1.3", "BSD", "CC0-1.0"]
FORM_FEED_SOURCES = ["/usr/lib/python3.11/email/feedparser.py", "/usr/lib/python3.11/email/header.py",
                     "/usr/lib/python3.11/email/charset.py", "/usr/lib/python3.11/email/generator.py",
                     "/usr/lib/python3.11/email/parser.py", "/usr/lib/python3.11/email/base64mime.py",
                     "/usr/include/argp.h", "/usr/include/regex.h", "/usr/include/gcrypt.h", "/usr/include/nettle/rsa.h",
                     "/usr/include/nettle/ecc.h", "/usr/include/nettle/sexp.h"]
CATALOGUE_LANGS = ["de", "fr", "es", "it", "pt_BR", "nl", "sv", "pl", "cs", "tr", "vi", "id", "fi", "hu", "ro", "ca",
                   "ru", "uk", "bg", "sr", "be", "kk", "mn", "el", "ka", "hy", "he", "ar", "fa", "hi", "mr", "bn", "ta",
                   "te", "gu", "pa", "ml", "kn", "th", "ja", "zh_CN", "zh_TW", "ko", "eo", "et", "lt", "sr@latin", "eu"]
CATALOGUE_DOMAINS = ["coreutils", "glib20", "gtk20", "Linux-PAM", "systemd", "xkeyboard-config", "gdk-pixbuf", "grep",
                     "libapt-pkg6.0", "apt", "PackageKit", "shared-mime-info", "gstreamer-1.0", "avahi", "appstream",
                     "iso_3166-1", "iso_639-3", "at-spi2-core", "software-properties", "gettext-runtime", "sed", "tar",
                     "diffutils", "findutils", "bash", "dpkg", "debconf", "gnupg2", "wget", "e2fsprogs"]


def package_of(path: str) -> str:
    done = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True, check=False)
    name = done.stdout.split(":", 1)[0] if done.returncode == 0 else "unknown"
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True, check=False).stdout
    return f"{name} {version}".strip()


def catalogue_text(path: str) -> str:
    """A .mo catalogue as the .po text gettext's own ``msgunfmt`` writes (control characters
    escaped as in a .po file: \\a, \\n, ...); empty when it is not UTF-8."""
    try:
        text = subprocess.run(["msgunfmt", path], capture_output=True, check=True).stdout.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    return text[: text.rfind("\n\n", 0, CAP) + 1] if len(text) > CAP else text


def man_text(path: str) -> str:
    env = {**os.environ, "MANWIDTH": "80", "LANG": "C.UTF-8", "MAN_KEEP_FORMATTING": ""}
    shown = subprocess.run(["man", "-l", path], capture_output=True, check=True, env=env).stdout
    plain = subprocess.run(["col", "-bx"], input=shown, capture_output=True, check=True).stdout.decode("utf-8")
    return plain[: plain.rfind("\n\n", 0, CAP) + 1] if len(plain) > CAP else plain


def rows() -> list[dict[str, str]]:
    out = []
    for name in LICENCES:
        path = f"/usr/share/common-licenses/{name}"
        out.append({"id": f"licence-{name}", "kind": "licence", "lang": "en", "source": f"{path} ({package_of(path)})",
                    "text": Path(path).read_text(encoding="utf-8")[:CAP]})
    for path in FORM_FEED_SOURCES:
        out.append({"id": f"source-{Path(path).name}", "kind": "form_feed_source", "lang": "en",
                    "source": f"{path} ({package_of(path)})", "text": Path(path).read_text(encoding="utf-8")[:CAP]})
    domains = iter(CATALOGUE_DOMAINS * 4)
    for lang in CATALOGUE_LANGS:
        for _ in range(len(CATALOGUE_DOMAINS)):
            domain = next(domains)
            path = f"/usr/share/locale/{lang}/LC_MESSAGES/{domain}.mo"
            if Path(path).exists() and len(text := catalogue_text(path)) > 3000:
                out.append({"id": f"po-{domain}-{lang}", "kind": "gettext_catalogue", "lang": lang,
                            "source": f"{path} ({package_of(path)})", "text": text})
                break
    for lang_dir in sorted(Path("/usr/share/man").iterdir()):
        if lang_dir.name.startswith("man"):
            continue
        pages = sorted(p for p in (lang_dir / "man1").glob("*.1.gz") if p.stat().st_size > 2500)[:2] if (lang_dir / "man1").is_dir() else []
        for page in pages:
            text = man_text(str(page))
            if len(text) > 3000:
                out.append({"id": f"man-{lang_dir.name}-{page.name.removesuffix('.1.gz')}", "kind": "man_page",
                            "lang": lang_dir.name, "source": f"{page} ({package_of(str(page))})", "text": text})
    return out


if __name__ == "__main__":
    collected = rows()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in collected), encoding="utf-8")
    print(f"{OUT.name}: {len(collected)} texts, {sum(len(r['text']) for r in collected)} characters")

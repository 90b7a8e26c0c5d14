"""One notion of comparable: the key of what decides a cell's figures, and what differs, in words.

Most "accuracy regressions" that turn out false compared two arms that differed in more than the
change: another eval set-up, a question set cut by `--limit`, a flag or an environment variable
set on one side only, another build, other devices. Every command that sets one cell's figures
against another's (the matrix's twins and baseline, `compare`, the history's series, `calibrate
--from-history`, bisect) asks this one module whether the two may be compared and, when not,
what differs.

A cell's `ComparabilityKey` holds, each part `None` where it is not recorded (a run stored before
it was, an external server):

* ``setup``: per eval, its set-up fingerprint (task, few-shot, generation settings, data, versions:
  what `evals.base.setup_fingerprint` stores under ``cell.json`` ``metrics.<eval>.setup``);
* ``questions``: per eval, how many questions or prompts it scored and whether a limit (`--limit`
  or the eval's own `limit`) cut them; which ones a limit asks is the set-up's ``subset`` rule,
  and a smaller limit asks a part of a larger one (evals/subsets.py), so two cuts pair on the
  smaller;
* ``model``: the model served (run.json ``model``; no engine reports its weights' identity yet);
* ``engine``: the engine profile (``sim``, ``vllm``, ...);
* ``argv`` and ``env``: the engine's arguments and environment as launched (cell.json ``launch``),
  without what never decides figures: the interpreter's folder, host and port values, internal
  ports (``isolation.internal_ports``), paths inside the run folder (fresh caches, logs) or the
  keyed cache folder (``isolation.cache.path``; its key and hit are recorded, never compared), the
  source tree's path (``build`` says which tree) and the device-visibility variables (``devices``
  says which devices). A secret is never held: a value already redacted stays ``***``, one
  known in full (a plan's) becomes ``***`` and a short hash of it, and ``***`` matches either;
* ``build``: the source tree's commit, else the engine's reported version;
* ``devices``: the devices' model and count (``8 x NVIDIA H100 80GB HBM3``).

API:

* ``key_of(run, cell) -> ComparabilityKey``: a stored cell's key (store/records.py records);
* ``launch_key(...) -> ComparabilityKey``: a planned launch's (``evalkit plan``: no engine started,
  so no set-up, questions, build commit or devices beyond what the config says);
* ``ComparabilityKey.digest``: a short stable string of the whole key (a database column), and
  ``digest_except(*fields)`` of all but some parts (a history series spans builds);
* ``compare_keys(a, b, sides) -> list[Difference]``: each difference with its part (``field``), what in it
  (``item``: a flag, a variable, an eval) and its words;
* ``differences(a, b, *, allow=()) -> list[str]``: the words of those not allowed, where `allow`
  names what the comparison expects to differ: a part (``"build"``) or one item of it
  (``"argv --sim-fix"``, ``"env VLLM_X"``, ``"setup gsm8k"``), as `Difference.name` spells it;
  ``comparable(a, b, allow=())`` is whether that list is empty; `sides` (default "the first",
  "the second") name the two where a thing is on one side only (``set in B only``).

A part unknown on either side is no difference: absence of a record is not evidence that two cells
differ, and runs stored before the key existed compare as they did.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evalkit.redact import REDACTED, is_secret, redact_argv
from evalkit.store.records import CellRecord, RunRecord

Field = Literal["setup", "questions", "model", "engine", "argv", "env", "build", "devices"]
FIELDS: tuple[Field, ...] = ("setup", "questions", "model", "engine", "argv", "env", "build", "devices")
"""The parts of a key, in the order differences are said."""

NEVER_DECIDES_FLAG = re.compile(
    r"^--?(?:[\w]+[-_])*(?:port|ports|host|hostname|log|logs|log[-_]file|log[-_]dir|log[-_]level|cache[-_]dir|"
    r"download[-_]dir)$", re.IGNORECASE)
"""Flags whose value never decides a figure: where the engine listens and where it writes logs or caches."""
NEVER_DECIDES_ENV = re.compile(r"VISIBLE_DEVICES$")
"""Variables that only pick devices (which devices the key's `devices` says)."""
HELD_SECRET = REDACTED
"""A secret as the key holds it: `***`, then `:` and a short hash when its value was known."""
SIDES = ("the first", "the second")
"""How a difference names a and b by default (a comparison names its own: `A`, a cell's id)."""
SHOWN_VALUE = 48
"""Characters of a value shown in a difference's words."""


class EvalKey(BaseModel):
    """One eval's part of a key: its set-up fingerprint and the questions it scored."""

    model_config = ConfigDict(frozen=True)

    name: str
    setup: str | None = None
    """The set-up fingerprint's hash (None: stored before fingerprints)."""
    fields: tuple[tuple[str, str], ...] = ()
    """The set-up's fields, each value as canonical JSON (what a difference names)."""
    questions: int | None = None
    """Questions or prompts scored (the eval's raw ``n``; None: not recorded)."""
    limited: bool | None = None
    """Whether a limit cut them (None: not known)."""


class ComparabilityKey(BaseModel):
    """What decides a cell's figures (see the module docstring); frozen and hashable, JSON both ways."""

    model_config = ConfigDict(frozen=True)

    evals: tuple[EvalKey, ...] = ()
    model: str | None = None
    engine: str | None = None
    argv: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] | None = None
    source: str | None = None
    """The source tree's commit (a plan's: ``repo@ref``)."""
    engine_version: str | None = None
    devices: str | None = None

    @property
    def digest(self) -> str:
        """16 hex characters of the whole key: equal keys, equal digests, in every process."""
        return self.digest_except()

    def digest_except(self, *fields: Field) -> str:
        """The digest of the key without `fields` (a history series: ``digest_except("build")``)."""
        return _hash(_parts(self, exclude=set(fields)))

    def eval_named(self, name: str) -> EvalKey | None:
        return next((e for e in self.evals if e.name == name), None)


@dataclass(frozen=True)
class Difference:
    """One way two keys differ."""

    field: Field
    item: str | None
    """What in the part differs: a flag, a variable, an eval's name; None: the part as a whole."""
    words: str
    """The difference for a reader: ``engine argv: --max-num-seqs 256 vs 128``."""

    @property
    def name(self) -> str:
        """How `allow` names it: the part (``build``), or the part and item (``argv --sim-fix``)."""
        return f"{self.field} {self.item}" if self.item else self.field


def differences(a: ComparabilityKey, b: ComparabilityKey, *, allow: Iterable[str] = (),
                sides: tuple[str, str] = SIDES) -> list[str]:
    """What differs between two keys, in words, leaving out what `allow` names (a part, or a part
    and item: see `Difference.name`); [] when the two may be compared. `sides` name a and b where
    a thing is on one side only (``set in B only``)."""
    allowed = set(allow)
    return [d.words for d in compare_keys(a, b, sides) if d.field not in allowed and d.name not in allowed]


def comparable(a: ComparabilityKey, b: ComparabilityKey, *, allow: Iterable[str] = ()) -> bool:
    """Whether nothing but what `allow` names differs."""
    return not differences(a, b, allow=allow)


def compare_keys(a: ComparabilityKey, b: ComparabilityKey, sides: tuple[str, str] = SIDES) -> list[Difference]:
    """Every difference between two keys, part by part in `FIELDS` order; a part unknown on
    either side is none."""
    out: list[Difference] = []
    evals_a, evals_b = {e.name: e for e in a.evals}, {e.name: e for e in b.evals}
    shared = [name for name in evals_a if name in evals_b]
    for name in shared:
        out += _setup(evals_a[name], evals_b[name])
    for name in shared:
        out += _questions(evals_a[name], evals_b[name])
    if a.model is not None and b.model is not None and a.model != b.model:
        out.append(Difference("model", None, f"model: {a.model} vs {b.model}"))
    if a.engine is not None and b.engine is not None and a.engine != b.engine:
        out.append(Difference("engine", None, f"engine: {a.engine} vs {b.engine}"))
    if a.argv is not None and b.argv is not None:
        out += _argv(a.argv, b.argv, sides)
    if a.env is not None and b.env is not None:
        out += _env(dict(a.env), dict(b.env), sides)
    out += _build(a, b)
    if a.devices is not None and b.devices is not None and a.devices != b.devices:
        out.append(Difference("devices", None, f"devices: {a.devices} vs {b.devices}"))
    return out


def key_of(run: RunRecord, cell: CellRecord) -> ComparabilityKey:
    """The key of a stored cell, from its run.json and cell.json."""
    launch = cell.launch or {}
    source = cell.source.sha if cell.source is not None else None
    tree = cell.imports.tree if cell.imports is not None else None
    external = "argv" not in launch
    return launch_key(
        model=run.model, engine=run.engine,
        argv=None if external else list(launch.get("argv") or []),
        env=None if external else dict(launch.get("env") or {}),
        source=source, engine_version=cell.engine_version, devices=_devices(run, cell),
        evals=_evals(run, cell),
        host=launch.get("host"), port=launch.get("port"),
        internal_flags=tuple((cell.isolation.internal_ports if cell.isolation is not None else {}) or ()),
        moved=tuple(p for p in (f"/{run.run_id}/", _folder(launch), tree, f"/worktrees/{source}" if source else None,
                                _keyed_cache(cell)) if p))


def _keyed_cache(cell: CellRecord) -> str | None:
    """The keyed cache folder the cell's engine used (engine/caches.py): where a cache lives, and
    whether it was warm, decides no figure, so cells keyed apart stay comparable."""
    cache = cell.isolation.cache if cell.isolation is not None else None
    return cache.path if cache is not None else None


def _folder(launch: Mapping[str, Any]) -> str | None:
    """The cell's folder as it was when the engine started (the parent of its `cwd`, engine_cwd):
    its fresh caches and logs lie inside, wherever the folder is now (a bisect step's too)."""
    cwd = launch.get("cwd")
    return f"{cwd.rsplit('/', 1)[0]}/" if isinstance(cwd, str) and "/" in cwd.strip("/") else None


def launch_key(*, model: str | None, engine: str | None, argv: Sequence[str] | None,
               env: Mapping[str, str] | None, source: str | None = None, engine_version: str | None = None,
               devices: str | None = None, evals: Sequence[EvalKey] = (), host: str | None = None,
               port: int | str | None = None, internal_flags: Iterable[str] = (), moved: Iterable[str] = (),
               secret_env: Iterable[str] = ()) -> ComparabilityKey:
    """A key from a launch's parts: a stored cell's (`key_of`) or a planned one (``evalkit plan``,
    whose `env` may hold secrets in full: only their hashes are kept). `host` and `port` are the
    launch's own (their values are left out wherever they appear), `internal_flags` the flags
    evalkit gave internal ports, `moved` the paths that change from launch to launch (the run
    folder, the source tree): a value holding one is kept as its placeholder."""
    moved = tuple(moved)
    return ComparabilityKey(
        evals=tuple(sorted(evals, key=lambda e: e.name)), model=model, engine=engine,
        argv=None if argv is None else _normal_argv(argv, model, host, port, set(internal_flags), moved),
        env=None if env is None else _normal_env(env, moved, set(secret_env)),
        source=source, engine_version=engine_version, devices=devices)


def _normal_argv(argv: Sequence[str], model: str | None, host: str | None, port: int | str | None,
                 internal: set[str], moved: tuple[str, ...]) -> tuple[str, ...]:
    """The argv without what never decides figures: the program's folder, the values of host, port,
    log and cache flags and of internal-port flags, and paths that move from launch to launch; the
    model's name as `<model>` (the key's `model` says it once); a secret flag's value as `***`."""
    argv = redact_argv(argv)
    out: list[str] = []
    hide_next = False
    for i, arg in enumerate(argv):
        if hide_next and not _is_flag(arg):
            out.append("<launch-specific>")
            hide_next = False
            continue
        hide_next = False
        flag, eq, value = arg.partition("=")
        if _is_flag(arg) and (NEVER_DECIDES_FLAG.match(flag) or flag in internal):
            out.append(f"{flag}=<launch-specific>" if eq else arg)
            hide_next = not eq
            continue
        if i == 0:
            out.append(arg.rsplit("/", 1)[-1])
        elif host is not None and arg == host or port is not None and arg == str(port):
            out.append("<launch-specific>")
        elif model and (arg == model or arg.endswith("/" + model)):
            out.append("<model>")
        else:
            out.append(_unmoved(arg, moved))
    return tuple(out)


def _normal_env(env: Mapping[str, str], moved: tuple[str, ...], secret: set[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in sorted(env.items()):
        if NEVER_DECIDES_ENV.search(name):
            continue
        if value == REDACTED or is_secret(name, secret):
            value = REDACTED if value == REDACTED else f"{REDACTED}:{hashlib.sha256(value.encode()).hexdigest()[:8]}"
        else:
            value = _unmoved(value, moved)
        out.append((name, value))
    return tuple(out)


def _unmoved(value: str, moved: tuple[str, ...]) -> str:
    """`value` with each path-list entry that holds a moving path replaced by a placeholder."""
    if not moved or not any(m in value for m in moved):
        return value
    return ":".join("<launch-specific path>" if any(m in part for m in moved) else part for part in value.split(":"))


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit() and arg[1] != "."


def _flags(argv: Sequence[str]) -> dict[str, list[str]]:
    """argv read as flag -> its values in order (a repeated flag's values together); what comes
    before the first flag (the program) under ``""``. A flag's order among flags decides nothing."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for arg in argv:
        if _is_flag(arg):
            current, eq, value = arg.partition("=")
            out.setdefault(current, [])
            if eq:
                out[current].append(value)
        else:
            out.setdefault(current, []).append(arg)
    return out


def _shown(values: Sequence[str] | str | None, absent: str) -> str:
    if values is None:
        return absent
    text = values if isinstance(values, str) else " ".join(values)
    return text if len(text) <= SHOWN_VALUE else text[:SHOWN_VALUE - 1] + "…"


def _argv(a: Sequence[str], b: Sequence[str], sides: tuple[str, str]) -> list[Difference]:
    fa, fb = _flags(a), _flags(b)
    out = []
    for flag in dict.fromkeys([*fa, *fb]):
        x, y = fa.get(flag), fb.get(flag)
        if x == y:
            continue
        if not flag:
            words = f"engine argv: program {_shown(x, '(none)')} vs {_shown(y, '(none)')}"
        elif x is None or y is None:
            present = x if x is not None else y
            side = sides[0] if x is not None else sides[1]
            words = f"engine argv: {_shown([flag, *(present or [])], '')} in {side} only"
        else:
            words = f"engine argv: {flag} {_shown(x, '(no value)')} vs {_shown(y, '(no value)')}"
        out.append(Difference("argv", flag or "program", words))
    return out


def _env(a: Mapping[str, str], b: Mapping[str, str], sides: tuple[str, str]) -> list[Difference]:
    out = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x == y or (x is not None and y is not None and _same_secret(x, y)):
            continue
        if x is None or y is None:
            side = sides[0] if x is not None else sides[1]
            words = f"env {name} set in {side} only"
        elif x.startswith(REDACTED) or y.startswith(REDACTED):
            words = f"env {name} differs (a secret: values not shown)"
        else:
            words = f"env {name}: {_shown(x, '')} vs {_shown(y, '')}"
        out.append(Difference("env", name, words))
    return out


def _same_secret(x: str, y: str) -> bool:
    """A redacted value (`***`) matches any secret; two hashed ones match when their hashes do."""
    return (x == REDACTED and y.startswith(REDACTED)) or (y == REDACTED and x.startswith(REDACTED))


def _build(a: ComparabilityKey, b: ComparabilityKey) -> list[Difference]:
    parts = []
    if a.source is not None and b.source is not None and a.source != b.source:
        parts.append(f"source {_short(a.source)} vs {_short(b.source)}")
    elif (a.source is None) != (b.source is None) and (a.source or b.source):
        parts.append(f"source {_short(a.source) if a.source else '(installed)'} vs "
                     f"{_short(b.source) if b.source else '(installed)'}")
    if a.engine_version is not None and b.engine_version is not None and a.engine_version != b.engine_version:
        parts.append(f"engine version {a.engine_version} vs {b.engine_version}")
    return [Difference("build", None, "build: " + ", ".join(parts))] if parts else []


def _short(source: str) -> str:
    """A commit as a reader sees it (12 characters); a plan's `repo@ref` as it is."""
    return source[:12] if re.fullmatch(r"[0-9a-f]{13,40}", source) else source


def _setup(a: EvalKey, b: EvalKey) -> list[Difference]:
    if a.setup is None or b.setup is None or a.setup == b.setup:
        return []
    fa, fb = dict(a.fields), dict(b.fields)
    named = [f"{k} {_shown(fa.get(k), '(none)')} vs {_shown(fb.get(k), '(none)')}"
             for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    return [Difference("setup", a.name, f"{a.name} setup: " + ("; ".join(named) or f"{a.setup} vs {b.setup}"))]


def _questions(a: EvalKey, b: EvalKey) -> list[Difference]:
    if a.questions is None or b.questions is None or a.questions == b.questions:
        return []
    subset = dict(a.fields).get("subset") or dict(b.fields).get("subset")
    rule = ""
    if subset:
        try:
            rule = f" ({json.loads(subset)['rule']})"
        except (ValueError, KeyError, TypeError):
            rule = ""

    def said(e: EvalKey) -> str:
        return f"all {e.questions}" if e.limited is False else f"{e.questions}{rule}"

    return [Difference("questions", a.name, f"{a.name} question set: {said(a)} vs {said(b)}")]


def _evals(run: RunRecord, cell: CellRecord) -> list[EvalKey]:
    """Each eval that ran in the cell: its set-up and how many questions it scored."""
    settings = (run.config or {}).get("evals") or {}
    out = []
    for name, raw in cell.metrics.items():
        if not isinstance(raw, Mapping):
            continue
        setup = raw.get("setup") if isinstance(raw.get("setup"), Mapping) else None
        fields = tuple(sorted((k, _canonical(v)) for k, v in ((setup or {}).get("fields") or {}).items()))
        n = raw.get("n")
        own = settings.get(name) if isinstance(settings.get(name), Mapping) else {}
        out.append(EvalKey(name=name, setup=setup.get("hash") if setup else None, fields=fields,
                           questions=n if isinstance(n, int) else None,
                           limited=run.limit is not None or (own or {}).get("limit") is not None))
    return out


def _devices(run: RunRecord, cell: CellRecord) -> str | None:
    """`8 x NVIDIA H100 80GB HBM3`: the cell's devices by model (run.json `gpus`), else by count."""
    listed = (run.gpus or {}).get("devices") or []
    by_uuid = {d.get("uuid"): d.get("name") for d in listed if isinstance(d, Mapping)}
    by_index = {d.get("index"): d.get("name") for d in listed if isinstance(d, Mapping)}
    if cell.gpu is not None and cell.gpu.uuids:
        names = [by_uuid.get(u) or "unknown" for u in cell.gpu.uuids]
    elif cell.devices:
        names = [by_index.get(i) or "device" for i in cell.devices]
    else:
        return None
    counted: dict[str, int] = {}
    for name in names:
        counted[name] = counted.get(name, 0) + 1
    return " + ".join(f"{count} x {name}" for name, count in sorted(counted.items()))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def _parts(key: ComparabilityKey, exclude: set[str]) -> dict[str, Any]:
    """The key's JSON without the parts in `exclude` (`questions` and `setup` live in `evals`)."""
    dumped = key.model_dump(mode="json")
    evals = [{k: v for k, v in e.items() if not (k in ("setup", "fields") and "setup" in exclude)
              and not (k in ("questions", "limited") and "questions" in exclude)} for e in dumped.pop("evals")]
    if "build" in exclude:
        dumped.pop("source")
        dumped.pop("engine_version")
    return {"evals": evals, **{k: v for k, v in dumped.items() if k not in exclude}}


def _hash(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(parts).encode()).hexdigest()[:16]

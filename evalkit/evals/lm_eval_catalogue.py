"""The tasks lm-eval ships, read from its YAML files without importing lm-eval or building its
TaskManager: what `evals.lm_eval` needs to know about a task before any engine starts.

For each configured name: is it a task or a group (a group is expanded into its tasks), its
YAML and the files it includes, the dataset it reads, its splits, its metrics and filters (the
names of evalkit's metrics and thresholds) and its output type. A name lm-eval does not ship is
refused with the closest names it does.

lm-eval's own TaskManager indexes the same ~14,000 YAML files with a full YAML parse (seconds);
here one regex pass finds the `task:`/`group:` lines and only the configured tasks' YAMLs are
parsed, their `!function` tags left unexecuted.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalkit.errors import EvalError

_NAME_LINE = re.compile(r"^(task|group):[ \t]*['\"]?([^\s'\"#\[]+)", re.M)
BINARY_METRICS = frozenset({"acc", "acc_norm", "exact_match", "em", "pass@1", "acc_mutual_info"})
"""lm-eval metrics scored 0 or 1 per question (paired between cells): what a config's thresholds
can be checked against before any run; a stored cell's own marks decide after it ran."""


class _IgnoreTags(yaml.SafeLoader):
    """lm-eval YAMLs hold `!function` tags; reading plain fields must not execute them."""


_IgnoreTags.add_multi_constructor("!", lambda loader, suffix, node: f"!{suffix} {getattr(node, 'value', '')}")


def tasks_root() -> Path:
    """lm-eval's `tasks` folder (located, not imported: the import takes ~1 s)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise EvalError("lm_eval: lm-eval is not installed (pip install -e . installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


@dataclass(frozen=True)
class Catalogue:
    tasks: dict[str, Path]
    groups: dict[str, Path]

    def close(self, name: str) -> list[str]:
        return difflib.get_close_matches(name, [*self.tasks, *self.groups], n=5, cutoff=0.6)


@functools.lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """Every task and group name lm-eval ships -> its YAML (~1 s, once per process)."""
    tasks: dict[str, Path] = {}
    groups: dict[str, Path] = {}
    for root, _, files in os.walk(tasks_root()):
        for name in sorted(files):
            if name.endswith(".yaml") or name.endswith("_yaml"):
                path = Path(root) / name
                for kind, found in _NAME_LINE.findall(path.read_text(encoding="utf-8", errors="replace")):
                    (tasks if kind == "task" else groups).setdefault(found, path)
    return Catalogue(tasks, groups)


def unknown_task(name: str) -> str | None:
    """Why `name` is not a task or group lm-eval ships (None when it is)."""
    cat = catalogue()
    if name in cat.tasks or name in cat.groups:
        return None
    close = cat.close(name)
    return f"unknown lm-eval task {name!r}" + (f" (close: {', '.join(close)})" if close else " (no close match)")


def _read(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        data = yaml.load(f, Loader=_IgnoreTags)
    return data if isinstance(data, dict) else {}


def _merged(path: Path) -> tuple[dict[str, Any], tuple[Path, ...]]:
    """A YAML with its `include`s applied as lm-eval applies them (the including file wins), and
    the files read."""
    own = _read(path)
    merged: dict[str, Any] = {}
    files: list[Path] = []
    includes = own.pop("include", None)
    for inc in [includes] if isinstance(includes, str) else includes or []:
        inc_path = Path(inc) if os.path.isabs(inc) else path.parent / inc
        config, read = _merged(inc_path)
        merged |= config
        files += read
    return merged | own, (*files, path)


@dataclass(frozen=True)
class TaskInfo:
    """One lm-eval task as its YAML declares it."""

    name: str
    yaml: Path
    files: tuple[Path, ...]
    """The YAML and every file it includes (its setup fingerprint hashes them)."""
    config: dict[str, Any]

    @property
    def dataset_path(self) -> str | None:
        return self.config.get("dataset_path")

    @property
    def output_type(self) -> str:
        return self.config.get("output_type", "generate_until")

    @property
    def filters(self) -> list[str]:
        return [f.get("name", "none") for f in self.config.get("filter_list") or []] or ["none"]

    @property
    def num_fewshot(self) -> int:
        return int(self.config.get("num_fewshot") or 0)

    @property
    def generation_kwargs(self) -> dict[str, Any]:
        return dict(self.config.get("generation_kwargs") or {})

    def metrics(self) -> list[tuple[str, bool, bool]]:
        """(metric, scored 0/1 per question, higher is better) per metric of its metric_list."""
        out = []
        for m in self.config.get("metric_list") or [{"metric": "exact_match"}]:
            name = str(m.get("metric"))
            binary = name in BINARY_METRICS and m.get("aggregation", "mean") == "mean"
            out.append((name, binary, bool(m.get("higher_is_better", True))))
        return out

    def keys(self) -> list[tuple[str, str, str]]:
        """(evalkit key, lm-eval metric, filter) per reported score: the key is the metric, plus
        the filter when the task has more than one (`exact_match.strict-match`)."""
        filters = self.filters
        return [(m if len(filters) == 1 else f"{m}.{f}", m, f) for m, _, _ in self.metrics() for f in filters]

    def splits(self, num_fewshot: int) -> list[str]:
        """The dataset splits lm-eval reads: the scored one, and the few-shot source when shots
        are drawn from the data (not listed in the YAML's `fewshot_config.samples`)."""
        c = self.config
        scored = c.get("test_split") or c.get("validation_split")
        out = [scored] if scored else []
        if num_fewshot > 0 and not (c.get("fewshot_config") or {}).get("samples"):
            source = c.get("fewshot_split") or c.get("training_split") or c.get("validation_split") or scored
            if source and source not in out:
                out.append(source)
        return out


def resolve(name: str) -> list[TaskInfo]:
    """The tasks `name` stands for: itself, or a group's tasks (nested groups expanded), in the
    group's order; EvalError for a name lm-eval does not ship or a group defining tasks inline."""
    if why := unknown_task(name):
        raise EvalError(f"lm_eval: {why}")
    cat = catalogue()
    if name in cat.tasks:
        config, files = _merged(cat.tasks[name])
        return [TaskInfo(name, cat.tasks[name], files, config)]
    group = _read(cat.groups[name])
    out: list[TaskInfo] = []
    for member in group.get("task") or []:
        if not isinstance(member, str):
            raise EvalError(f"lm_eval: group {name!r} defines tasks inline ({cat.groups[name]}); list its tasks by name")
        out += resolve(member)
    return out

"""The test suite's tiers, measured: wall time per tier and per test file, and line and branch
coverage of evalkit/ per tier and for their union, the processes the tests start included.

Each tier runs as its own `python -m pytest -m EXPR` from the checkout given (default: this one),
under coverage when `--coverage` is given (pyproject.toml's [tool.coverage.run]: branches, and
every Python process a test starts measures itself), with a JUnit file whose test times give the
seconds per file. CPU seconds (the tier's whole process tree: pytest, its workers, the engines
and CLIs they start and wait for) read less of what else the machine is doing than wall seconds. A figure of a tier run with `--workers N` is pytest-xdist's wall time over N
workers. Figures go to stdout as a table and to OUT/tiers.json; docs/tests.md quotes them.

    python benchmarks/test_tiers.py --out /tmp/tiers                        # every tier, as .ci/run runs them
    python benchmarks/test_tiers.py --out /tmp/tiers --tiers default --coverage
    python benchmarks/test_tiers.py --out /tmp/before --checkout /tmp/old-clone --tiers "not real_engine and not slurm and not slow"

A checkout other than this one is measured with its own tests and its own evalkit (PYTHONPATH
points at it, so the processes its tests start import it too). A tier is a marker expression;
the names default, e2e and slow stand for this checkout's tiers (README.md, Tests).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from xml.etree import ElementTree

HERE = Path(__file__).resolve().parent.parent
TIERS = {
    "default": "not e2e and not real_engine and not slurm and not slow",
    "e2e": "e2e and not real_engine and not slurm and not slow",
    "slow": "slow and not real_engine and not slurm",
}
WORKERS = {"default": 2, "e2e": 2, "slow": 2}
"""pytest-xdist workers per tier, as .ci/run runs them on 2 cores (addopts' -n auto); `--workers 0`
runs a tier in one process (how coverage of the default tier compares with the old one-process suite)."""


def run_tier(checkout: Path, name: str, expr: str, out: Path, workers: int, coverage: bool) -> dict[str, object]:
    """One tier: its wall seconds, counts from the JUnit file, seconds per file."""
    folder = out / name.replace(" ", "_")
    folder.mkdir(parents=True, exist_ok=True)
    junit = folder / "junit.xml"
    pytest_args = ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", expr, f"--junitxml={junit}",
                   "--durations=0", "-o", "junit_duration_report=total"]
    # always said: pyproject.toml's addopts (-n auto) would otherwise spread a tier meant for one process
    pytest_args += ["-n", str(workers)]
    argv = [sys.executable, *(["-m", "coverage", "run", f"--rcfile={checkout / 'pyproject.toml'}"] if coverage else []),
            *pytest_args]
    env = {**os.environ, "PYTHONPATH": str(checkout), "COVERAGE_FILE": str(folder / ".coverage")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with (folder / "pytest.log").open("w") as log:
        done = subprocess.run(argv, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    counts, per_file = read_junit(junit)
    return {"tier": name, "expr": expr, "workers": workers, "exit": done.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), **counts, "per_file_s": per_file}


def read_junit(path: Path) -> tuple[dict[str, int], dict[str, float]]:
    """Test counts and the seconds of each test file (setup, call and teardown of its tests)."""
    if not path.exists():
        return {}, {}
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    per_file: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(path).iter("testcase"):
        counts["tests"] += 1
        for kind, key in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            counts[key] += case.find(kind) is not None
        module = case.get("classname", "").split(".")
        file = "/".join(part for part in module if not part[:1].isupper()) + ".py"
        per_file[file] += float(case.get("time", 0))
    return counts, {f: round(s, 1) for f, s in sorted(per_file.items(), key=lambda kv: -kv[1])}


def coverage_of(checkout: Path, folders: list[Path], into: Path) -> dict[str, float]:
    """Line and branch coverage of evalkit/ over the data files of `folders`, combined in `into`."""
    into.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COVERAGE_FILE": str(into / ".coverage")}
    rc = ["--rcfile", str(checkout / "pyproject.toml")]
    data = [str(f) for f in folders]
    subprocess.run([sys.executable, "-m", "coverage", "combine", "--keep", "-q", *rc, *data], cwd=checkout, env=env,
                   check=True)
    report = into / "coverage.json"
    subprocess.run([sys.executable, "-m", "coverage", "json", "-q", *rc, "-o", str(report)], cwd=checkout, env=env,
                   check=True)
    totals = json.loads(report.read_text())["totals"]
    return {"lines_pct": round(100 * totals["covered_lines"] / max(1, totals["num_statements"]), 2),
            "branches_pct": round(100 * totals["covered_branches"] / max(1, totals["num_branches"]), 2),
            "covered_lines": totals["covered_lines"], "statements": totals["num_statements"],
            "covered_branches": totals["covered_branches"], "branches": totals["num_branches"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a folder for the logs, JUnit, coverage data, tiers.json")
    parser.add_argument("--checkout", type=Path, default=HERE, help="the checkout whose suite to measure")
    parser.add_argument("--tiers", default="default,e2e,slow",
                        help="comma-separated tier names (default, e2e, slow) or marker expressions")
    parser.add_argument("--coverage", action="store_true", help="measure coverage too (slower)")
    parser.add_argument("--workers", type=int, default=None, help="xdist workers for every tier (default: as .ci/run)")
    parser.add_argument("--top", type=int, default=10, help="files shown per tier, slowest first")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    results = []
    for name in [t.strip() for t in args.tiers.split(",") if t.strip()]:
        workers = args.workers if args.workers is not None else WORKERS.get(name, 0)
        result = run_tier(checkout, name, TIERS.get(name, name), args.out, workers, args.coverage)
        if args.coverage:
            result["coverage"] = coverage_of(checkout, [args.out / name.replace(" ", "_")], args.out / "cov" / name.replace(" ", "_"))
        results.append(result)
        print(f"{name:<10} {result['wall_s']:>8.1f} s wall {result['cpu_s']:>8.1f} s CPU  exit {result['exit']}  {result.get('tests', 0)} tests "
              f"({result.get('failed', 0)} failed, {result.get('errors', 0)} errors, {result.get('skipped', 0)} skipped)"
              + (f"  lines {result['coverage']['lines_pct']}%  branches {result['coverage']['branches_pct']}%"  # type: ignore[index]
                 if args.coverage else ""), flush=True)
        for file, seconds in list(result["per_file_s"].items())[: args.top]:  # type: ignore[union-attr]
            print(f"    {seconds:>8.1f} s  {file}")
    summary: dict[str, object] = {"checkout": str(checkout), "tiers": results}
    if args.coverage and len(results) > 1:
        folders = [args.out / str(r["tier"]).replace(" ", "_") for r in results]
        summary["union"] = coverage_of(checkout, folders, args.out / "cov" / "union")
        union = summary["union"]
        print(f"union      lines {union['lines_pct']}%  branches {union['branches_pct']}%")  # type: ignore[index]
    (args.out / "tiers.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

"""The comparability key (evalkit/store/comparability.py): what decides a cell's figures, and
what differs between two cells in words a reader acts on.

Every command that sets one cell against another asks this module; these tests pin what it
counts as a difference (the eval set-up, the question set, the model, the engine's argv and
environment, its build, the devices) and what it never does (ports, hosts, the interpreter's
folder, paths inside a run folder, the source tree's path, device-visibility variables), and
that it never holds a secret.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from evalkit.store.comparability import (
    FIELDS,
    ComparabilityKey,
    EvalKey,
    comparable,
    compare_keys,
    differences,
    key_of,
    launch_key,
)
from evalkit.store.records import CellRecord, RunRecord

SETUP = {"hash": "a5775829e7d593ab", "fields": {"task": "evalkit_gsm8k", "num_fewshot": 3,
                                                 "subset": {"rule": "stratified", "seed": 0}}}


def run_record(run_id: str = "20261207-031710-demo", limit: int | None = None, **fields: Any) -> RunRecord:
    return RunRecord(run_id=run_id, status="complete", model="sim/deepseek-v4", engine="sim",
                     config_path="/x/configs/demo.yaml", config={}, limit=limit, **fields)


def cell_record(run_id: str = "20261207-031710-demo", cell_id: str = "dp8-piecewise-fixon", port: int = 39283,
                args: tuple[str, ...] = ("--sim-fix", "on"), env: dict[str, str] | None = None, n: int = 1319,
                setup: dict[str, Any] | None = None, python: str = "/tmp/a/.venv/bin/python3",
                **fields: Any) -> CellRecord:
    argv = [python, "-m", "evalkit.sim", "--model", "sim/deepseek-v4", "--host", "127.0.0.1",
            "--server-port", str(port), "-tp", "8", *args]
    launch = {"argv": argv, "env": {"PYTHONSAFEPATH": "1", **(env or {})}, "host": "127.0.0.1", "port": port,
              "cwd": f"/results/{run_id}/{cell_id}/engine_cwd"}
    return CellRecord(id=cell_id, axes={}, status="ok", launch=launch,
                      metrics={"gsm8k": {"flexible": 0.94, "n": n, "setup": setup or SETUP}}, **fields)


def test_a_twin_pair_differs_only_in_its_declared_flag() -> None:
    """The demo's twins differ in `--sim-fix` alone: said in words, and allowed by naming it."""
    run = run_record()
    on, off = key_of(run, cell_record()), key_of(run, cell_record(cell_id="x-fixoff", port=40001,
                                                                  args=("--sim-fix", "off")))
    assert differences(on, off) == ["engine argv: --sim-fix on vs off"]
    assert differences(on, off, allow=["argv --sim-fix"]) == []
    assert differences(on, off, allow=["argv"]) == []
    assert not comparable(on, off) and comparable(on, off, allow=["argv --sim-fix"])


def test_ports_hosts_interpreter_folders_and_run_folders_never_differ() -> None:
    """Two runs from two checkouts on other ports, with fresh caches and internal ports of their own
    and the source tree at its own path, are the same configuration: none of it decides a figure."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    a = cell_record(run_id="r1", port=39283, python="/tmp/a/.venv/bin/python3",
                    args=("--sim-fix", "on", "--log-file", "/tmp/a.log", "--dist-init-port", "29500"),
                    env={"VLLM_CACHE_ROOT": "/results/r1/dp8-piecewise-fixon/engine-cache/VLLM_CACHE_ROOT",
                         "CUDA_VISIBLE_DEVICES": "0,1", "PYTHONPATH": f"/cache/worktrees/{sha}:/opt/extra"},
                    source={"repo": "r", "ref": "main", "sha": sha},
                    isolation={"internal_ports": {"--dist-init-port": "29500"}})
    b = cell_record(run_id="r2", port=40111, python="/home/b/venv/bin/python3",
                    args=("--sim-fix", "on", "--log-file", "/var/b.log", "--dist-init-port", "31000"),
                    env={"VLLM_CACHE_ROOT": "/results/r2/dp8-piecewise-fixon/engine-cache/VLLM_CACHE_ROOT",
                         "CUDA_VISIBLE_DEVICES": "4,5", "PYTHONPATH": f"/other/worktrees/{sha}:/opt/extra"},
                    source={"repo": "r", "ref": "main", "sha": sha},
                    isolation={"internal_ports": {"--dist-init-port": "31000"}})
    ka, kb = key_of(run_record("r1"), a), key_of(run_record("r2"), b)
    assert compare_keys(ka, kb) == []
    assert ka.digest == kb.digest


def test_a_flag_or_variable_set_on_one_side_only_is_named() -> None:
    """What public engine issues found behind false regressions: a flag or an environment variable
    set on one side only."""
    run = run_record()
    a = key_of(run, cell_record(args=("--sim-fix", "on", "--max-num-seqs", "256")))
    b = key_of(run, cell_record(args=("--sim-fix", "on", "--max-num-seqs", "128", "--enforce-eager"),
                                env={"EVALKIT_X": "1"}))
    assert differences(a, b) == ["engine argv: --max-num-seqs 256 vs 128",
                                 "engine argv: --enforce-eager in the second only",
                                 "env EVALKIT_X set in the second only"]
    assert differences(a, b, sides=("A", "B"))[1:] == ["engine argv: --enforce-eager in B only", "env EVALKIT_X set in B only"]


def test_flag_order_decides_nothing_but_values_do() -> None:
    """`--a 1 --b 2` and `--b 2 --a 1` launch the same engine; `--a=1` is `--a 1`."""
    a = launch_key(model="m", engine="vllm", argv=["vllm", "serve", "--a", "1", "--b", "2"], env={})
    b = launch_key(model="m", engine="vllm", argv=["vllm", "serve", "--b", "2", "--a=1"], env={})
    c = launch_key(model="m", engine="vllm", argv=["vllm", "serve", "--b", "2", "--a=3"], env={})
    assert compare_keys(a, b) == []
    assert differences(a, c) == ["engine argv: --a 1 vs 3"]


def test_a_limited_question_set_is_said_with_its_rule_and_size() -> None:
    """A `--limit 200` run scored 200 of GSM8K's questions, drawn by its subset rule: the words say
    so, and a comparison that pairs on shared questions allows it by name."""
    full = key_of(run_record(), cell_record())
    cut = key_of(run_record(limit=200), cell_record(n=200))
    assert differences(cut, full) == ["gsm8k question set: 200 (stratified) vs all 1319"]
    assert differences(cut, full, allow=["questions"]) == []


def test_an_eval_setup_difference_names_its_fields() -> None:
    other = {"hash": "ffff", "fields": {**SETUP["fields"], "num_fewshot": 5}}
    a, b = key_of(run_record(), cell_record()), key_of(run_record(), cell_record(setup=other))
    assert differences(a, b) == ["gsm8k setup: num_fewshot 3 vs 5"]
    assert differences(a, b, allow=["setup gsm8k"]) == []


def test_build_and_devices_differences_are_said() -> None:
    """Another engine commit, or other GPUs, decide figures: both said, by commit and by device model."""
    gpus = {"devices": [{"index": 0, "uuid": "u0", "name": "NVIDIA H100"}, {"index": 1, "uuid": "u1", "name": "NVIDIA H100"},
                        {"index": 2, "uuid": "u2", "name": "AMD MI300X"}]}
    run = run_record(gpus=gpus)
    a = key_of(run, cell_record(source={"repo": "r", "ref": "a", "sha": "1" * 40}, gpu={"uuids": ["u0", "u1"]}))
    b = key_of(run, cell_record(source={"repo": "r", "ref": "b", "sha": "2" * 40}, devices=[2]))
    assert differences(a, b) == [f"build: source {'1' * 12} vs {'2' * 12}", "devices: 2 x NVIDIA H100 vs 1 x AMD MI300X"]
    assert a.digest_except("build", "devices") == b.digest_except("build", "devices") != a.digest


def test_a_secret_is_never_held_and_a_redacted_one_matches() -> None:
    """A plan's launch has secrets in full: the key keeps a short hash, never the value; a stored
    cell's redacted `***` matches any value; two known, different secrets differ without showing either."""
    planned = launch_key(model="m", engine="sim", argv=["x"], env={"HF_TOKEN": "hf_supersecretvalue"})
    other = launch_key(model="m", engine="sim", argv=["x"], env={"HF_TOKEN": "hf_anothersecret"})
    stored = key_of(run_record(), cell_record(env={"HF_TOKEN": "***"}))
    assert "supersecret" not in planned.model_dump_json()
    assert differences(planned, other) == ["env HF_TOKEN differs (a secret: values not shown)"]
    stored_twin = key_of(run_record(), cell_record(env={"HF_TOKEN": "***"}))
    assert compare_keys(stored, stored_twin) == []
    redacted = launch_key(model="m", engine="sim", argv=["x"], env={"HF_TOKEN": "***"})
    assert compare_keys(planned, redacted) == []


def test_an_unknown_part_is_no_difference() -> None:
    """An external server records no argv, an old run no set-up: absence is not evidence of a difference."""
    launched = key_of(run_record(), cell_record())
    external = key_of(run_record(base_url="http://h:8000"),
                      CellRecord(id="c", axes={}, status="ok", launch={"base_url": "http://h:8000"},
                                 metrics={"gsm8k": {"n": 1319}}))
    assert compare_keys(launched, external) == []


def test_a_key_reads_back_from_its_json_with_its_digest() -> None:
    """A database stores the key as JSON (and its digest): read back, it is the same key."""
    key = key_of(run_record(), cell_record())
    again = ComparabilityKey.model_validate_json(key.model_dump_json())
    assert again == key and again.digest == key.digest and hash(again) == hash(key)


_token = st.text("abcdefxyz0123", min_size=1, max_size=4)
_evals = st.lists(st.builds(EvalKey, name=st.sampled_from(["gsm8k", "repetition"]),
                            setup=st.sampled_from([None, "h1", "h2"]), questions=st.sampled_from([None, 5, 200, 1319]),
                            limited=st.booleans()), max_size=2, unique_by=lambda e: e.name)
keys = st.builds(
    ComparabilityKey, evals=_evals.map(tuple),
    model=st.sampled_from([None, "m1", "m2"]), engine=st.sampled_from([None, "sim", "vllm"]),
    argv=st.one_of(st.none(), st.lists(st.sampled_from(["prog", "--a", "--b", "1", "2", "-x"]), max_size=6).map(tuple)),
    env=st.one_of(st.none(), st.dictionaries(st.sampled_from(["A", "B", "HF_TOKEN"]), _token, max_size=3)
                  .map(lambda d: tuple(sorted(d.items())))),
    source=st.sampled_from([None, "1" * 40, "2" * 40]), engine_version=st.sampled_from([None, "0.1", "0.2"]),
    devices=st.sampled_from([None, "8 x H100", "8 x MI300X"]))


@given(keys, keys)
def test_differences_are_symmetric_and_a_key_equals_itself(a: ComparabilityKey, b: ComparabilityKey) -> None:
    """Whichever side a comparison puts first, the same parts differ; no key differs from itself;
    allowing every part leaves nothing."""
    assert compare_keys(a, a) == []
    assert sorted(d.name for d in compare_keys(a, b)) == sorted(d.name for d in compare_keys(b, a))
    assert differences(a, b, allow=FIELDS) == []
    assert all(d.field in FIELDS and d.words for d in compare_keys(a, b))


@given(keys, keys)
def test_equal_digests_mean_nothing_differs(a: ComparabilityKey, b: ComparabilityKey) -> None:
    """A history keyed by digest never puts two cells in one series that the key says differ."""
    if a.digest == b.digest:
        assert compare_keys(a, b) == []
    if a.digest_except("build") == b.digest_except("build"):
        assert all(d.field == "build" for d in compare_keys(a, b))


@given(keys, st.sampled_from(["model", "engine", "source", "devices"]))
def test_changing_one_known_part_is_one_difference_of_that_part(key: ComparabilityKey, part: str) -> None:
    """Each part changed alone, where known on both sides, is exactly one difference, of that part."""
    if getattr(key, part) is None:
        return
    changed = key.model_copy(update={part: getattr(key, part) + "-changed"})
    found = compare_keys(key, changed)
    assert [d.field for d in found] == [{"source": "build"}.get(part, part)]


def test_a_cell_folder_moved_anywhere_keeps_its_caches_out_of_the_key() -> None:
    """A bisect step's cell lives outside any run folder: its fresh caches lie in its own folder,
    which the engine's `cwd` names, and so never differ between two steps."""
    def step(folder: str) -> CellRecord:
        record = cell_record(env={"VLLM_CACHE_ROOT": f"{folder}/engine-cache/VLLM_CACHE_ROOT"})
        return record.model_copy(update={"launch": {**(record.launch or {}), "cwd": f"{folder}/engine_cwd"}})

    a = key_of(run_record("bisect-1"), step("/b/bisect-1/steps/1a2b/dp8-piecewise-fixoff"))
    b = key_of(run_record("bisect-2"), step("/elsewhere/steps/9f8e/dp8-piecewise-fixoff"))
    assert compare_keys(a, b) == []

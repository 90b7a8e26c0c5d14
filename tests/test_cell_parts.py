"""A cell's record assembled from the pieces its steps return (evalkit/run/parts.py): where each
piece lands in cell.json, in what order, and what a cell that failed half-way keeps."""

from __future__ import annotations

from typing import Any

from evalkit.config import EngineSettings
from evalkit.config.cells import Cell
from evalkit.run.parts import (
    Begun,
    Catalog,
    CellPart,
    Ended,
    EngineLog,
    EngineStarted,
    EngineStopped,
    EngineVersion,
    EvalRun,
    Gpus,
    Imports,
    Launch,
    Ready,
    Scraped,
    Step,
    assemble,
)
from evalkit.store.records import CellError, CellRecord, ImportInfo, IsolationRecord, RanAsRecord

CELL = Cell("tp8", {"parallel": "tp8"}, EngineSettings(), (), {}, None)
BEGUN = Begun(started_at="t0", source=None, devices=[0])
LAUNCH = {"argv": ["python3", "-m", "evalkit.sim"], "port": 41927}
IMPORTS = ImportInfo(package="atom", origin="/venv/atom/__init__.py")
SPEED = {"completion_tokens": 10, "wall_s": 2.0, "tokens_per_s": 5.0, "tokens_from": "usage", "timed": "eval"}
RELEASE = {"wait_s": 1.5, "released": True, "over_mib": {}, "held": []}


def ended(status: Any = "ok", **fields: Any) -> Ended:
    return Ended(status, total_s=9.0, finished_at="t1", **fields)


def started(port: int = 41927) -> list[CellPart]:
    """An engine launch that became ready."""
    return [Launch({**LAUNCH, "port": port}, IsolationRecord(cache_env={"X_CACHE": "/c"})), EngineStarted(port),
            Ready(engine_start_s=1.0, engine_ready_s=1.2, warmup_attempts=1)]


def test_an_ok_cell_is_its_pieces_each_in_its_field_and_timings_in_the_order_the_phases_ended() -> None:
    parts: list[CellPart] = [
        Catalog(None), Imports(IMPORTS), *started(),
        EngineLog(RanAsRecord(mode="FULL"), None), EngineVersion(asked=True, version="0.1"),
        EvalRun("gsm8k", {"n": 5}, 2.0), Scraped("gsm8k", {"requests": 5}, SPEED),
        EvalRun("repetition", {"n": 3}, 3.0), Scraped("repetition", {"missing": "why"}, SPEED),
        Gpus(uuids=["GPU-0"], before_mib={"0": 1}, telemetry={"samples": 4}, release=RELEASE, release_wait_s=1.5),
        EngineStopped(stop_s=0.2, wall_s=8.0),
    ]
    record = assemble(CELL, BEGUN, parts, ended())
    assert record.dump() == {
        "schema_version": 1, "id": "tp8", "axes": {"parallel": "tp8"}, "status": "ok", "started_at": "t0",
        "source": None, "devices": [0],
        "gpu": {"uuids": ["GPU-0"], "before_mib": {"0": 1}, "release": RELEASE, "telemetry": {"samples": 4}},
        "isolation": {"cache_env": {"X_CACHE": "/c"}},
        "timings": {"engine_start_s": 1.0, "engine_ready_s": 1.2, "warmup_attempts": 1, "gsm8k_s": 2.0,
                    "repetition_s": 3.0, "gpu_release_s": 1.5, "engine_stop_s": 0.2, "engine_wall_s": 8.0,
                    "total_s": 9.0},
        "metrics": {"gsm8k": {"n": 5}, "repetition": {"n": 3}},
        "launch": LAUNCH, "engine_pid": 41927, "effective_mode": "FULL", "ran_as": {"mode": "FULL"},
        "engine_version": "0.1", "imports": {"package": "atom", "origin": "/venv/atom/__init__.py"}, "catalog": None,
        "engine_metrics": {"gsm8k": {"requests": 5}, "repetition": {"missing": "why"}},
        "throughput": {"gsm8k": SPEED, "repetition": SPEED}, "finished_at": "t1",
    }
    assert list(record.dump()["timings"]) == list(record.timings)


def test_what_no_piece_gave_is_left_out_of_the_record() -> None:
    """An external server: no isolation, no GPUs, no engine figures; a profile without a version
    endpoint records no `engine_version`, one with it records what it said, even nothing."""
    external = [Launch({"base_url": "http://127.0.0.1:8000", "note": "external"}), EngineVersion(asked=False),
                EvalRun("gsm8k", {"n": 5}, 2.0)]
    dumped = assemble(CELL, BEGUN, external, ended()).dump()
    assert set(dumped) == {"schema_version", "id", "axes", "status", "started_at", "source", "devices", "timings",
                           "metrics", "launch", "finished_at"}
    assert dumped["timings"] == {"gsm8k_s": 2.0, "total_s": 9.0}
    unanswered = assemble(CELL, BEGUN, [EngineVersion(asked=True)], ended()).dump()
    assert unanswered["engine_version"] is None and "engine_check" not in unanswered


def test_a_cell_that_failed_half_way_keeps_every_piece_before_its_failure_and_its_error() -> None:
    """The engine died during the second eval: the first eval's metrics, the launch, the GPUs'
    memory wait (telemetry sampled until then) and the stop are all kept."""
    parts = [*started(), EvalRun("gsm8k", {"n": 5}, 2.0),
             Gpus(uuids=[], before_mib={"0": 1}, release=RELEASE, release_wait_s=1.5), EngineStopped(None, 4.0)]
    error = CellError(type="EngineExited", message="engine exited with code 3", exit_code=3, log_tail="tail")
    record = assemble(CELL, BEGUN, parts, ended("error", error=error))
    dumped = record.dump()
    assert (record.status, record.message) == ("error", "engine exited with code 3")
    assert dumped["metrics"] == {"gsm8k": {"n": 5}}
    assert list(dumped["timings"]) == ["engine_start_s", "engine_ready_s", "warmup_attempts", "gsm8k_s",
                                       "gpu_release_s", "engine_wall_s", "total_s"]
    assert dumped["gpu"] == {"uuids": [], "before_mib": {"0": 1}, "release": RELEASE}, "nothing sampled: no telemetry"
    assert dumped["launch"] == LAUNCH and dumped["engine_pid"] == 41927 and "traceback" not in dumped
    bug = assemble(CELL, BEGUN, [], ended("error", error=CellError(message="internal error: x"), traceback="Tb"))
    assert bug.traceback == "Tb" and bug.dump()["timings"] == {"total_s": 9.0}
    stopped = assemble(CELL, BEGUN, parts, ended("interrupted", error=error))
    assert stopped.status == "interrupted" and stopped.error == error


def test_a_later_launch_replaces_the_earlier_ones_pieces_and_a_step_adds_its_own_key() -> None:
    """Another port after a lost race: the record shows the launch that ran, its pid and its stop."""
    parts = [Launch(LAUNCH), EngineStarted(1), EngineStopped(0.1, 0.5), *started(port=41999),
             EngineStopped(0.3, 6.0), Step({"verdict": "bad"})]
    record = assemble(CELL, BEGUN, parts, ended())
    dumped = record.dump()
    assert dumped["launch"]["port"] == 41999 and dumped["engine_pid"] == 41999
    assert dumped["timings"]["engine_stop_s"] == 0.3
    assert list(dumped)[-1] == "step" and dumped["step"] == {"verdict": "bad"}
    assert CellRecord.model_validate(dumped).dump() == dumped

"""ATOM (ROCm/ATOM): `python -m atom.entrypoints.openai_server`.

Flags as read from ROCm/ATOM at ffdf3bb5 (atom/model_engine/arg_utils.py, EngineArgs.add_cli_args;
atom/entrypoints/openai/api_server.py) and checked at the fix commit ccc861dc5:
`--server-port` is the HTTP port (`--port` is the internal engine port), `--host` defaults to
0.0.0.0 upstream so evalkit always passes one, DP attention is `--enable-dp-attention` on top of
`-tp N`, graph mode is `--cudagraph-mode {NONE,PIECEWISE,FULL,FULL_AND_PIECEWISE}` (default
FULL) or `--enforce-eager`. `--served-model-name` only exists since 5e491a90b (after the fix), so
it is passed only when the config asks for a served name other than the model.
ATOM's completions protocol drops `logprobs`, so the detector splits text instead of using ids.

Caches and internal ports (`isolation`; engine/isolation.py does the work), read at 0e9804c21 and
ccc861dc5 (and HEAD ffdf3bb5):
- the torch.compile cache is `~/.cache/atom` (atom/utils/backends.py:475, a plain
  `os.path.expanduser`, so no variable moves it but HOME), keyed without `cudagraph_mode`
  (atom/config.py:222-240, CompilationConfig.compute_hash); ATOM's CI empties it before every
  launch (.github/scripts/atom_test.sh:52). evalkit does the same (unless `engine.cache:
  engine`) and never runs two ATOM cells side by side while it does. It cannot be keyed
  (`engine.cache: keyed` is refused): no variable moves it, at HEAD ffdf3bb5 too;
- `--port` (default 8006, atom/model_engine/arg_utils.py:112-116) becomes MASTER_PORT
  (atom/model_engine/model_runner.py:832): each launch gets its own from evalkit's port book;
- with more than one DP rank (`-dp N`, or `--enable-dp-attention`, which makes every TP rank a DP
  rank: atom/model_engine/engine_core_mgr.py:33-40) each engine core joins a gloo group on
  `data_parallel_master_port`, 29500 (atom/config.py:761, engine_core.py:504). No flag sets it,
  and `ATOM_DP_MASTER_PORT` (atom/utils/envs.py:30) is read only since e9688b1af (HEAD's
  atom/config.py:910; at the refs the line is commented out, config.py:843-844): two DP cells
  never run side by side.

Disaggregated serving (`topology: {pd: ...}`; `ATOM_TOPOLOGY`), read at ffdf3bb5d: each worker is
the same server with `--kv-transfer-config` (atom/model_engine/arg_utils.py:393-398, a JSON string)
holding `kv_role` `kv_producer` (prefill) or `kv_consumer` (decode), `kv_connector` `mooncake`,
`proxy_ip` and `handshake_port`, as ATOM's own PD job builds it
(.github/scripts/atomesh/pd_server_atom.sh:560 and :612; a worker's TP ranks take consecutive
handshake ports from it, :1148 and :1169, so evalkit pins a block of TP ports); the role is
readable at `GET /kv_transfer_info` (atom/entrypoints/openai/api_server.py:1948). The router is
atomesh, `atomesh launch --host H --port P --pd-disaggregation --prefill URL --decode URL
--backend atom --prometheus-port Q` (atom/mesh/src/cliargs.rs: host/port :203-209, default
0.0.0.0:30000; `--decode` appended :262-264; `--prefill` parsed from argv :17-60;
`--prometheus-port` default 29000 :308-310, so evalkit pins one; pd_server_atom.sh:656-668 launches
it so), found on PATH (`topology.pd.router.command` gives another argv). ATOM has no engine
across nodes at this ref (no `--nnodes` in arg_utils.py): a `ranks` cell is refused.

No setup step is needed: ATOM is pure Python at these refs (torch, aiter and friends must be
installed for `engine.python`).

Finish reasons are ATOM's own (`ATOM_FINISH_REASONS`), and every completions stream ends with the
real last chunk, an extra empty chunk saying "stop", a usage-only chunk and `[DONE]`: the stream
reader keeps a choice's first reason (evals/repetition.py). ATOM's chat stream, unlike its
completions stream, sends no reason but a final "stop" (or "tool_calls";
atom/entrypoints/openai/serving_chat.py at 0e9804c21, `stream_chat_response`): through chat a cut
cannot be told from a natural end, so long generations on ATOM go through completions.

The tree that runs: the package `atom` sits at the root of ROCm/ATOM (`atom/entrypoints/openai_server.py`
at 0e9804c21 and ccc861dc5, `git ls-tree`), so a worktree's root goes on PYTHONPATH. No start-up line
naming ATOM's own file is known, so the import path is the only proof of the tree.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from evalkit.config import EngineSettings
from evalkit.config.topology import Part
from evalkit.profiles import Launch, Profile, SpecCounts
from evalkit.profiles.isolation import FixedPort, InternalPort, Isolation, data_parallel
from evalkit.profiles.ran import RanAs
from evalkit.profiles.topology import PartContext, TopologySpelling, kv_transfer_config
from evalkit.wire import FinishMap

ATOM_SETTINGS = frozenset(
    {"tensor_parallel", "data_parallel", "dp_attention", "expert_parallel", "graph_mode"}
)
ATOM_FATAL_PATTERNS = (
    r"stopped, reason", r"MEMORY_VIOLATION", r"ASSERT_TRAP", r"proc died unexpectedly", r"Memory access fault by GPU"
)
"""ATOM's own CI fault grep (scripts/wait_infer_drain.sh: FAULT_PATTERN)."""
ATOM_ISOLATION = Isolation(
    fixed_cache_dirs=("~/.cache/atom",),
    internal_ports=(InternalPort("--port"),),
    fixed_ports=(FixedPort(29500, "ATOM's DP master port, atom/config.py:761 at 0e9804c21, set by no flag",
                           when=data_parallel),),
)
ENGINE_KWARGS = re.compile(r"Engine kwargs: \{.*\}")
"""atom/model_engine/arg_utils.py:369 at 0e9804c21 and ccc861dc5 (`logger.info(f"Engine kwargs: {kwargs}")`):
the dict's repr, `'enforce_eager': False, ...` and `'compilation_config': CompilationConfig(level=3, ...,
cudagraph_mode=<CUDAGraphMode.FULL: 2>, ...)` (a dataclass repr holding a plain Enum's
`<Name.MEMBER: value>`). `--enforce-eager` leaves cudagraph_mode at its default FULL."""
_KWARG = r"'{}': (True|False|\d+)"
_KWARGS_MODE = re.compile(r"cudagraph_mode=<CUDAGraphMode\.([A-Z_]+): ")
DP_ATTENTION = re.compile(r"Enable dp attention, using (\d+) data parallel ranks")
"""atom/model_engine/engine_core_mgr.py:37 at both refs: CoreManager with enable_dp_attention
(then tp x dp engine cores, each with TP 1)."""
PIECEWISE_CAPTURE = re.compile(r"PIECEWISE cudagraph: capturing per-piece graphs \(attention eager\); "
                               r"manual FULL whole-forward capture disabled\.")
"""atom/model_engine/model_runner.py:2426 (0e9804c21), :2463 (ccc861dc5), `capture_cudagraph`: logged
when `_piecewise_cg_active()` (not enforce_eager and cudagraph_mode requires piecewise compilation,
i.e. PIECEWISE or FULL_AND_PIECEWISE); otherwise the runner captures manual FULL whole-forward graphs."""
CAPTURE_COST = re.compile(r"cudagraph capture\[[^\]]*\] cost: [0-9.]+ seconds")
"""atom/model_engine/engine_core.py:140 at both refs: `{label}: cudagraph capture{bs} cost: X seconds`,
logged after any graph capture and only when not enforce_eager."""
FIX_LINE = re.compile(r"PIECEWISE: forced aiter ca_comm \((\w+)\) to unreg copy-in capture path "
                      r"for cudagraph-safe DP collectives\.")
"""The fix of PR #1596 (atom/model_engine/model_runner.py:2454 at ccc861dc5 only,
`_force_aiter_unreg_capture_for_piecewise`): once per distinct aiter custom-all-reduce communicator of
the TP, DP and EP groups (`%s` is the getter: `get_tp_group`, ...), only in the PIECEWISE capture path
and only when the installed aiter's communicator has `enable_register_for_capturing` (else a silent no-op)."""
PIECEWISE_MODES = frozenset({"PIECEWISE", "FULL_AND_PIECEWISE"})
MTP_INTERVAL = re.compile(r"\[MTP Stats Interval\] Average toks/fwd: [0-9.]+, Accepted/Total Draft tokens: "
                          r"(\d+)/(\d+), Acceptance rate: [0-9.]+%, Accepted tokens distribution: \{([^}]*)\}")
"""atom/model_engine/scheduler.py `SpecStats._log` (:104 at 0e9804c21 and ccc861dc5, :112 at HEAD ffdf3bb5):
every `log_interval * mtp_k` draft tokens (1000 verify steps; `update` runs once per sequence per decode
step and adds `mtp_k` draft tokens) the scheduler logs this line for the steps since its last one, then
the cumulative `[MTP Stats         ] ...` line of the same shape, and starts a new interval. The
distribution's keys are 0..mtp_k (accepted drafts per step), so a line's steps are its draft tokens / mtp_k.
ATOM's CI reads the last cumulative line's `Acceptance rate` (.github/scripts/atom_test.sh:347 at
ccc861dc5 and HEAD) and gates it on `mtp_accept_threshold` (.github/workflows/atom-test.yaml:594-624 at HEAD)."""


def read_mtp_log(text: str) -> SpecCounts | None:
    """The speculative decoding counts ATOM logged in `text` (the lines of one eval's window), or
    None when it logged none.

    The window's counts are the differences of the cumulative counts around it, summed here as the
    interval lines logged inside it: each interval line is exactly the difference of two
    consecutive cumulative lines of one scheduler, and the sum stays right when several schedulers
    log (one per DP rank under `--enable-dp-attention`, engine_core_mgr.py), whose unlabelled
    cumulative lines interleave and cannot be told apart. Its resolution is one interval: steps
    after a scheduler's last line of the window count in the next window."""
    drafts = draft_tokens = accepted = lines = 0
    for found in MTP_INTERVAL.finditer(text):
        took, proposed = int(found.group(1)), int(found.group(2))
        keys = [int(key) for key in re.findall(r"(\d+):", found.group(3))]
        width = max(keys, default=0)
        if width == 0:
            continue
        drafts += proposed // width
        draft_tokens += proposed
        accepted += took
        lines += 1
    return SpecCounts(drafts, draft_tokens, accepted, lines) if lines else None


def read_atom_log(text: str) -> RanAs:
    """What ATOM ran, from the log of one launch up to the moment it serves (see the patterns above
    for where each line is logged; every ATOM process configures the `atom` logger on importing
    atom.utils, atom/utils/__init__.py:832, so the engine cores' lines reach the same stderr).

    eager when `'enforce_eager': True` (cudagraph_mode then still says FULL); else the mode in
    Engine kwargs, corrected by what the runner logged: the PIECEWISE capture line means per-piece
    graphs; a capture without it under a piecewise mode means manual FULL graphs; no capture line
    at all means no graphs (ATOM captures before it serves). The layout is Engine kwargs' TP and DP
    sizes and the DP-attention line (its rank count)."""
    kwargs = _last(ENGINE_KWARGS, text)
    if kwargs is None:
        return RanAs()
    evidence = [kwargs]
    eager, tp, dp = (_kwarg(kwargs, key) for key in ("enforce_eager", "tensor_parallel_size", "data_parallel_size"))
    found = _KWARGS_MODE.search(kwargs)
    mode = found.group(1) if found else None
    capture = _last(CAPTURE_COST, text)
    if eager == "True":
        mode = "eager"
    elif (piecewise := _last(PIECEWISE_CAPTURE, text)) is not None:
        evidence.append(piecewise)
        mode = mode if mode in PIECEWISE_MODES else "PIECEWISE"
    elif capture is None:
        evidence.append("no `cudagraph capture[...] cost` line before the engine served: no graphs captured")
        mode = "NONE"
    else:
        evidence.append(capture)
        mode = "FULL" if mode in PIECEWISE_MODES else mode
    ranks_line = _last(DP_ATTENTION, text)
    ranks = None
    if ranks_line is not None:
        evidence.append(ranks_line)
        ranks = int(found.group(1)) if (found := DP_ATTENTION.search(ranks_line)) else None
    return RanAs(mode=mode, tensor_parallel=int(tp) if tp else None, data_parallel=int(dp) if dp else None,
                 dp_attention=ranks_line is not None, dp_attention_ranks=ranks,
                 evidence=evidence)


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    """The whole last line holding a match of `pattern`, stripped."""
    lines = [line.strip() for line in text.splitlines() if pattern.search(line)]
    return lines[-1] if lines else None


def _kwarg(line: str, key: str) -> str | None:
    found = re.search(_KWARG.format(key), line)
    return found.group(1) if found else None
ATOM_FINISH_REASONS: FinishMap = MappingProxyType({
    "max_tokens": "length",
    "eos": "stop",
    "stop_sequence": "stop",
    r"stop_\d+": "stop",
    "aborted": "aborted",
    "stop": "stop",
})
"""ATOM's raw reasons -> evalkit's, read at 0e9804c21 and ccc861dc5 (unchanged between them):
atom/model_engine/scheduler.py sets `leave_reason` to "max_tokens" (:1499, the output reached
max_tokens), "eos" (:1481), "stop_sequence" (:1476, a stop string), f"stop_{token id}" (:1489, one of
the model's stop token ids) or "aborted" (:778 and :1449, the client went away); the response
carries it as `finish_reason` (atom/entrypoints/openai/api_server.py:342, serving_completion.py
`create_completion_chunk`). "stop" is the trailing empty chunk of every stream
(serving_completion.py, `stream_completion_response`) and the chat stream's only reason. A sequence
refused as `unschedulable: ...` (scheduler.py:794) maps to nothing: unknown, judged as cut."""


def atom_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """ATOM's flags for the logical settings; also the simulator's, which mimics ATOM."""
    flags = ["--model", launch.model, "--host", launch.host, "--server-port", str(launch.port)]
    if launch.served_name != launch.model:
        flags += ["--served-model-name", launch.served_name]
    if settings.tensor_parallel is not None:
        flags += ["-tp", str(settings.tensor_parallel)]
    if settings.data_parallel is not None:
        flags += ["-dp", str(settings.data_parallel)]
    if settings.dp_attention:
        flags.append("--enable-dp-attention")
    if settings.expert_parallel:
        flags.append("--enable-expert-parallel")
    if settings.graph_mode == "eager":
        flags.append("--enforce-eager")
    elif settings.graph_mode is not None:
        flags += ["--cudagraph-mode", settings.graph_mode]
    return flags


_VALUED = {"-tp": "tensor_parallel", "--tensor-parallel-size": "tensor_parallel",
           "-dp": "data_parallel", "--data-parallel-size": "data_parallel", "--cudagraph-mode": "graph_mode"}
_SWITCHES: dict[str, tuple[str, object]] = {"--enable-dp-attention": ("dp_attention", True), "--enable-expert-parallel": ("expert_parallel", True),
             "--enforce-eager": ("graph_mode", "eager")}


def atom_settings(flags: list[str]) -> tuple[EngineSettings, list[str]]:
    """The inverse of `atom_flags` for flags from ATOM's catalog (extraArgs): the settings they set
    (`-tp 8`, `--enable-dp-attention`, `--cudagraph-mode PIECEWISE`, ...) and every other flag, in
    order. `--enforce-eager` wins over a mode, as in ATOM (graphs stay off whatever the mode says)."""
    found: dict[str, object] = {}
    rest: list[str] = []
    i = 0
    while i < len(flags):
        name, _, inline = flags[i].partition("=")
        if name in _VALUED and (inline or i + 1 < len(flags)):
            value = inline or flags[i + 1]
            key = _VALUED[name]
            if key != "graph_mode" or found.get(key) != "eager":
                found[key] = value if key == "graph_mode" else int(value)
            i += 1 if inline else 2
            continue
        if flags[i] in _SWITCHES:
            setting, switched = _SWITCHES[flags[i]]
            found[setting] = switched
        else:
            rest.append(flags[i])
        i += 1
    return EngineSettings.model_validate(found), rest


def atom_worker_flags(ctx: PartContext) -> list[str]:
    """A PD worker's `--kv-transfer-config`, as pd_server_atom.sh:560/:612 spells it."""
    role = "kv_producer" if ctx.part.role == "prefill" else "kv_consumer"
    return ["--kv-transfer-config", kv_transfer_config(kv_role=role, kv_connector="mooncake", proxy_ip=ctx.host,
                                                       handshake_port=_int(ctx.ports["handshake"]))]


def atom_router(ctx: PartContext) -> list[str]:
    """atomesh's PD launch line (pd_server_atom.sh:656-668, cliargs.rs)."""
    return ["atomesh", "launch", "--host", ctx.host, "--port", str(ctx.port), "--pd-disaggregation",
            *ctx.peer_flags(),
            "--backend", "atom", "--prometheus-host", ctx.host, "--prometheus-port", str(ctx.ports["prometheus"])]


def atom_worker_ports(part: Part) -> dict[str, int]:
    """A PD worker's internal ports: mooncake's handshake port, one per TP rank."""
    return {"handshake": part.settings.tensor_parallel or 1}


def _int(port: int | str) -> int | str:
    """A pinned port as JSON wants it (a number), a plan's placeholder as it is."""
    return int(port) if isinstance(port, int) or str(port).isdigit() else port


ATOM_TOPOLOGY = TopologySpelling(
    read_at="ROCm/ATOM ffdf3bb5d",
    worker_flags=atom_worker_flags,
    worker_ports=atom_worker_ports,
    router=atom_router,
    router_ports={"prometheus": 1},
)


PROFILE = Profile(
    name="atom",
    entrypoint=("{python}", "-m", "atom.entrypoints.openai_server"),
    flags=atom_flags,
    health_path="/health",
    fatal_patterns=ATOM_FATAL_PATTERNS,
    read_log=read_atom_log,
    settings_supported=ATOM_SETTINGS,
    finish_reasons=ATOM_FINISH_REASONS,
    # ROCm: one variable only. ROCR_VISIBLE_DEVICES filters first and HIP_VISIBLE_DEVICES then
    # indexes into what is left, so setting both to the same ids would hide devices.
    visibility_env=("HIP_VISIBLE_DEVICES",),
    isolation=ATOM_ISOLATION,
    package="atom",
    spec_log=read_mtp_log,
    catalog_flags=atom_settings,
    topology=ATOM_TOPOLOGY,
)

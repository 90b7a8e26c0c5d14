"""Prefill/decode disaggregation: the KV state a prefill worker hands a decode worker, as bytes.

Why a real payload: a PD-only accuracy loss in ATOM, SGLang and vLLM comes from the handoff's
mechanics (a KV layout read with the wrong TP split, a dropped block), so the simulator's bug
must come from the bytes too, never from a test of the two TPs.

The state. Per prompt token t and KV head h (``KV_HEADS``, a GQA model's 8) a 32-bit hidden-state
id, mixed from (seed, the token's id, the token before it, t, h): what a real KV cache is to the
simulated model, the same in every cell (it is exact, not floating point), so equal TPs decode
exactly what a single instance computes. Laid out as the producer's TP ranks hold it: rank r owns
heads r*H/TP .. (r+1)*H/TP - 1, token-major, the ranks one after the other (``pack``).

The seeded bug. The consumer splits the payload into as many rank slices as **its own** TP
(``unpack`` with its TP); with another producer TP the slices cut across the producer's ranks and
every token's heads land in wrong places. ``--sim-kv-layout-fix on`` splits by the producer's
``tp_size`` from ``kv_transfer_params``, as ATOM's connector maps ranks (mooncake_connector.py:917
at ROCm/ATOM ffdf3bb5d). The consumer then decodes from the state it read: the share of prompt
tokens whose state differs from the prompt's own (``KvDamage.share``) is how far the model's
attention is off, and the model (evalkit/sim/model.py) turns right answers wrong and long
generations into collapse in proportion, as much as the demo's buggy cell at a share of 1.

The protocol is ATOM's Mooncake one (docs/simulator.md, "Disaggregated and multi-node"): a request
with ``kv_transfer_params.do_remote_decode`` makes the producer keep the state (``KvStore``) and
answer the params a consumer needs; the consumer fetches ``GET /kv/TRANSFER_ID`` from the producer.
Wire format of a payload: ``MAGIC``, a 4-byte little-endian header length, a JSON header
(``tp_size``, ``heads``, each prompt's token count), then each prompt's state, little-endian u32.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import numpy as np

from evalkit.sim.hashing import hash64
from evalkit.sim.tokens import token_id, tokenize

KV_HEADS = 8
"""KV heads of the simulated model: a TP that does not divide them cannot hold its share."""
KV_TP_SIZES = (1, 2, 4, 8)
MAGIC = b"EVALKIT-SIM-KV1\n"
KEPT = 1024
"""Transfers a producer keeps unfetched (oldest dropped first), as a real one frees blocks on a timeout."""
HOST_ENV = "ATOM_HOST_IP"
"""ATOM's override of the address a producer advertises (atom/kv_transfer/disaggregation/README.md)."""

KvRole = Literal["kv_producer", "kv_consumer"]
KV_ROLES: tuple[KvRole, ...] = ("kv_producer", "kv_consumer")
_U32 = np.dtype("<u4")


class KvConfigError(ValueError):
    """A ``--kv-transfer-config`` the simulator cannot run with."""


class TransferError(Exception):
    """A handoff that failed: the consumer answers the request with this message (HTTP 502)."""


@dataclass(frozen=True)
class KvTransfer:
    """``--kv-transfer-config`` as the simulator reads it, and the fix of its layout bug."""

    role: KvRole
    connector: str
    handshake_port: int | None
    layout_fix: bool

    @classmethod
    def parse(cls, text: str, tp: int, *, layout_fix: bool) -> KvTransfer:
        """ATOM's JSON (config.py parses it with json.loads); a bad one is one line naming the key."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise KvConfigError(f"--kv-transfer-config is not JSON: {error}") from error
        if not isinstance(value, dict):
            raise KvConfigError("--kv-transfer-config must be a JSON object")
        role = value.get("kv_role")
        if role not in KV_ROLES:
            raise KvConfigError(f"--kv-transfer-config: kv_role must be one of {', '.join(KV_ROLES)}, not {role!r}")
        port = value.get("handshake_port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
            raise KvConfigError(f"--kv-transfer-config: handshake_port must be an integer, not {port!r}")
        if tp not in KV_TP_SIZES:
            raise KvConfigError(f"--tensor-parallel-size {tp}: the simulated model's {KV_HEADS} KV heads split "
                                f"over {', '.join(map(str, KV_TP_SIZES))} ranks only")
        return cls(role, str(value.get("kv_connector", "mooncake")), port, layout_fix)


@dataclass(frozen=True)
class KvDamage:
    """How far the state a consumer decoded from is off the prompt's own."""

    share: float
    """Share of the prompt's tokens whose state is wrong (0: exactly a single instance's)."""
    key: int
    """A digest of the state read: which answers the damage turns is keyed by what was read."""


def hidden_states(text: str, seed: int) -> np.ndarray:
    """The prompt's KV state: (tokens, KV_HEADS) hidden-state ids (module docstring)."""
    ids = np.array([token_id(t) for t in tokenize(text)], dtype=np.uint64)
    before = np.concatenate([np.zeros(1, dtype=np.uint64), ids[:-1]]) if len(ids) else ids
    positions = np.arange(len(ids), dtype=np.uint64)
    heads = np.arange(KV_HEADS, dtype=np.uint64)
    base = np.uint64(hash64(seed, "kv-state"))
    with np.errstate(over="ignore"):
        x = (base + ids * np.uint64(0x9E3779B97F4A7C15) + before * np.uint64(0xC2B2AE3D27D4EB4F)
             + positions * np.uint64(0x165667B19E3779F9))[:, None] + heads[None, :] * np.uint64(0x27D4EB2F165667C5)
        x = (x ^ (x >> np.uint64(31))) * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(29))
    return (x & np.uint64(0xFFFFFFFF)).astype(_U32)


def pack(states: list[np.ndarray], tp: int) -> bytes:
    """The payload of a request's prompts as a producer of TP ``tp`` holds them."""
    header = json.dumps({"tp_size": tp, "heads": KV_HEADS, "tokens": [len(s) for s in states]}).encode()
    parts = [MAGIC, struct.pack("<I", len(header)), header]
    per_rank = KV_HEADS // tp
    for state in states:
        parts += [np.ascontiguousarray(state[:, r * per_rank:(r + 1) * per_rank], dtype=_U32).tobytes()
                  for r in range(tp)]
    return b"".join(parts)


def unpack(payload: bytes, split: int | None) -> tuple[dict[str, Any], list[np.ndarray]]:
    """The header and each prompt's (tokens, KV_HEADS) state, read as ``split`` rank slices (None:
    the producer's own ``tp_size`` from the header, the fixed reading)."""
    if not payload.startswith(MAGIC) or len(payload) < len(MAGIC) + 4:
        raise TransferError("the KV payload does not start with the simulator's magic")
    (size,) = struct.unpack_from("<I", payload, len(MAGIC))
    start = len(MAGIC) + 4 + size
    header = json.loads(payload[len(MAGIC) + 4:start])
    split = split or int(header["tp_size"])
    per_rank = KV_HEADS // split
    states, at = [], start
    for tokens in header["tokens"]:
        flat = np.frombuffer(payload, dtype=_U32, count=tokens * KV_HEADS, offset=at)
        at += flat.nbytes
        slices = [flat[r * tokens * per_rank:(r + 1) * tokens * per_rank].reshape(tokens, per_rank)
                  for r in range(split)]
        states.append(np.concatenate(slices, axis=1) if tokens else np.zeros((0, KV_HEADS), dtype=_U32))
    if at != len(payload):
        raise TransferError(f"the KV payload holds {len(payload) - at} bytes beyond its {len(states)} prompt(s)")
    return header, states


def damage(read: np.ndarray, expected: np.ndarray) -> KvDamage:
    """How far the state ``read`` is off the prompt's own ``expected``."""
    wrong = (read != expected).any(axis=1)
    share = float(wrong.mean()) if len(wrong) else 0.0
    return KvDamage(share, hash64("kv-read", read.tobytes()))


class KvStore:
    """A producer's kept states, by transfer id, each fetched once."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._payloads: OrderedDict[str, bytes] = OrderedDict()

    def keep(self, payload: bytes) -> str:
        """Keep a request's payload; its transfer id."""
        transfer_id = f"xfer-{uuid.uuid4()}"
        self._payloads[transfer_id] = payload
        while len(self._payloads) > self._kept:
            self._payloads.popitem(last=False)
        return transfer_id

    def take(self, transfer_id: str) -> bytes | None:
        """The payload, gone from the store once fetched; None if unknown or dropped."""
        return self._payloads.pop(transfer_id, None)


def remote_params(transfer_id: str, host_header: str, tp: int, dp: int) -> dict[str, Any]:
    """The ``kv_transfer_params`` a producer answers (ATOM's mooncake_connector.py:421 fields that a
    consumer needs), ``remote_host`` the address the request reached it by unless ATOM_HOST_IP says."""
    host, _, port = host_header.rpartition(":")
    if not host or not port.isdigit():
        host, port = host_header, "80"
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_host": os.environ.get(HOST_ENV) or host,
            "remote_port": int(port), "transfer_id": transfer_id, "tp_size": tp, "dp_size": dp}


def payload_url(params: Any) -> str:
    """Where a consumer fetches the state named by a producer's ``kv_transfer_params``."""
    if not isinstance(params, dict):
        raise TransferError("kv_transfer_params must be an object")
    missing = [key for key in ("remote_host", "remote_port", "transfer_id", "tp_size") if key not in params]
    if missing:
        raise TransferError(f"kv_transfer_params lacks {', '.join(missing)}")
    host = str(params["remote_host"])
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{int(params['remote_port'])}/kv/{params['transfer_id']}"


async def receive(client: httpx.AsyncClient, params: Any, contexts: list[str], seed: int, tp: int,
                  layout_fix: bool) -> list[KvDamage]:
    """A consumer's side of the handoff: fetch the request's payload from its producer, read it by
    this worker's TP (the bug) or the producer's (``layout_fix``), and say how far each prompt's
    state is off its own."""
    url = payload_url(params)
    try:
        response = await client.get(url)
    except httpx.HTTPError as error:
        raise TransferError(f"GET {url}: {type(error).__name__}: {error}") from error
    if response.status_code != 200:
        raise TransferError(f"GET {url}: HTTP {response.status_code}")
    _, states = unpack(response.content, None if layout_fix else tp)
    if len(states) != len(contexts):
        raise TransferError(f"the payload holds {len(states)} prompt(s), the request {len(contexts)}")
    damages = []
    for state, context in zip(states, contexts, strict=True):
        expected = hidden_states(context, seed)
        if state.shape != expected.shape:
            raise TransferError(f"the payload holds {len(state)} tokens of state, the prompt has {len(expected)}")
        damages.append(damage(state, expected))
    return damages

"""evalkit's simulated engine: a real OpenAI-compatible HTTP server with no model behind it.

There is no GPU where evalkit is developed and tested, so ``python -m evalkit.sim`` stands in
for ATOM (``python -m atom.entrypoints.openai_server``): it takes ATOM's flags, logs the
lines evalkit parses, serves ``/health``, ``/v1/models``, ``/v1/completions`` and
``/v1/chat/completions``, and reproduces the signature of ATOM PR #1596. With DP attention
(``--enable-dp-attention``), no expert parallelism, effective ``--cudagraph-mode PIECEWISE``
and the fix off, GSM8K drops from ~0.94 to ~0.87, ~30% of long generations collapse
into repeated tokens and identical short requests sent together disagree (a race between
ranks); TP, FULL, eager, DP + EP and everything with the fix on stay clean.
It is evalkit's equivalent of a mock transport, but a real process on a real port, so
the whole matrix (and lm-eval itself) can be tested offline. It also injects faults
(crashes, hangs, bad responses, an orphan child) to test engine supervision.

Modules, one concern each:

- ``__main__``: the command line (ATOM's flags plus ``--sim-*``), built into a config.
- ``config``: frozen settings: the serving cell, model behaviour, timing, faults.
- ``process``: start-up log lines, simulated load, bind, uvicorn, signals.
- ``server``: the Starlette app: routes, streaming, pacing, stats, fault hooks.
- ``openai``: request validation and response bodies in the OpenAI wire format.
- ``model``: what the simulated model answers in a cell (GSM8K correctness, collapse).
- ``batching``: requests that arrive together share a step; what that does to short greedy text.
- ``gsm8k``: the shipped test set: find a question in a prompt, right and wrong solutions.
- ``prose``: healthy long text for other prompts.
- ``logprobs``: next-token distributions behind every logprob, perturbed per cell's numerics.
- ``tokens``: the deterministic tokeniser and token ids.
- ``hashing``: keyed pseudo-randomness (no global RNG state anywhere).
- ``faults``: runtime side of fault injection.
- ``disagg``: a PD worker's KV state as bytes in its TP's layout, the handoff, the seeded layout bug.
- ``router``: ``python -m evalkit.sim.router``, the PD router (atomesh's flags) in front of the workers.
- ``ranks``: one engine over several nodes: rank 0 serves once the others joined; none outlives the group.
"""

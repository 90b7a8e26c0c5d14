"""The box's GPUs, read through the vendors' tools: provenance, busy devices before a run, memory
given back after each engine, telemetry while it runs. Nothing here on a box without a GPU tool."""

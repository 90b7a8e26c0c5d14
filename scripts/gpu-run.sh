#!/usr/bin/env bash
# Issue 31 part 5: evalkit's GPU care on a real NVIDIA box with one free GPU (docs/gpus.md "On a
# real GPU"), with configs/gpu-linger.yaml (the simulator holding GPU memory with torch).
#
#   scripts/gpu-run.sh OUTDIR        run everything from the repository root, logs under OUTDIR
#
# Needs nvidia-smi, torch with CUDA and evalkit's dependencies importable by python3 (on the
# device machine: the wheels installed under /tmp/site and PYTHONPATH set, see docs/gpus.md).
# Steps, each logged to OUTDIR/log.txt with its exit code and seconds:
#   1. the GPU as nvidia-smi and torch see it;
#   2. the fakes' tests (tests/test_gpu_devices.py, test_gpu_matrix.py, test_sim_gpu.py);
#   3. the two cells of gpu-linger.yaml: the wait for a lingering worker's memory, UUIDs,
#      telemetry, provenance; nvidia-smi read every 0.5 s beside it (OUTDIR/smi.csv);
#   4. the lingering cell with gpu_release 3 s: GpuMemoryHeld naming the holder;
#   5. a foreign torch process holding 8 GiB: the refusal (exit 4, one line), then
#      --wait-for-gpus 90 waiting for it to exit;
#   6. scripts/gpu_run_summary.py: the figures of every run as JSON (OUTDIR/summary.json).
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu-run.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
LOG=$OUTDIR/log.txt
RESULTS=$OUTDIR/results
EK=(python3 -m evalkit.cli matrix --config configs/gpu-linger.yaml --results-dir "$RESULTS" --no-history)
SMI_Q=index,uuid,name,memory.used,memory.total,utilization.gpu,driver_version

say() { echo "### $(date -u +%T.%N | cut -c1-12) $*" | tee -a "$LOG"; }
step() {  # step NAME TIMEOUT CMD...: run, log output, exit code and seconds
    local name=$1 limit=$2; shift 2
    say "$name: $*"
    local t0; t0=$(date +%s%N)
    timeout "$limit" "$@" >>"$LOG" 2>&1
    local rc=$?
    say "$name: exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    return $rc
}
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }
wait_idle() {  # until GPU 0 uses at most 600 MiB (at most $1 s)
    local end=$(( $(date +%s) + $1 ))
    while [ "$(gpu_used)" -gt 600 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.5; done
    say "GPU 0 used: $(gpu_used) MiB"
}

say "1. the GPU"
step nvidia-smi 30 nvidia-smi
step query-gpu 30 nvidia-smi --query-gpu=$SMI_Q --format=csv,noheader,nounits
step query-apps 30 nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits
step torch 120 python3 -c 'import torch; p = torch.cuda.get_device_properties(0)
print("torch", torch.__version__, "cuda", torch.version.cuda, "|", p.name, "| uuid", p.uuid, "|", p.total_memory >> 20, "MiB")'

step versions 120 python3 -c 'import importlib.metadata as m
print(*(f"{d} {m.version(d)}" for d in ("torch", "transformers", "huggingface-hub", "datasets", "lm_eval", "pydantic")), sep=" | ")
import transformers, datasets, lm_eval  # noqa: F401 - lm-eval imports transformers on a box that has it'
step collect-env 120 python3 -c 'import time; t = time.monotonic(); from torch.utils.collect_env import get_pretty_env_info
get_pretty_env_info(); print(f"torch collect_env (lm-eval runs it per evaluation when torch is installed): {time.monotonic() - t:.2f} s")'

say "2. the fakes' tests"
step pytest 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_devices.py tests/test_gpu_matrix.py tests/test_sim_gpu.py

say "3. two cells: a worker that lingers 8 s after its engine stopped, one that stops with it"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader,nounits -lms 500 >"$OUTDIR/smi.csv" 2>&1 &
SMI=$!
step matrix 150 "${EK[@]}" --limit 20 --run-id linger
wait_idle 30
kill "$SMI"

say "4. the lingering cell with gpu_release 3 s: GpuMemoryHeld"
sed 's/gpu_release: 60/gpu_release: 3/' configs/gpu-linger.yaml >"$OUTDIR/gpu-linger-3s.yaml"
step held 90 python3 -m evalkit.cli matrix --config "$OUTDIR/gpu-linger-3s.yaml" --results-dir "$RESULTS" --no-history \
    --limit 5 --run-id held --only worker=lingers
wait_idle 30

say "5. a foreign process holds 8 GiB: refused, then waited for"
python3 -c 'import torch, time; x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda"); x.fill_(1)
import os; print("foreign pid", os.getpid(), "holds 8 GiB", flush=True); time.sleep(30)' >>"$LOG" 2>&1 &
FOREIGN=$!
end=$(( $(date +%s) + 60 ))
while [ "$(gpu_used)" -lt 8000 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.5; done
say "GPU 0 used: $(gpu_used) MiB (foreign pid $FOREIGN)"
say "refused: ${EK[*]} --limit 5 --run-id refused"
timeout 60 "${EK[@]}" --limit 5 --run-id refused >>"$LOG" 2>"$OUTDIR/refused.stderr"
say "refused: exit $?"
say "refused stderr ($(wc -l <"$OUTDIR/refused.stderr") lines): $(cat "$OUTDIR/refused.stderr")"
say "refused run folder exists: $(test -e "$RESULTS/refused" && echo yes || echo no)"
step waited 150 "${EK[@]}" --limit 5 --run-id waited --only worker=exits --wait-for-gpus 90
wait "$FOREIGN"; say "foreign exited: $?"

say "6. summary"
python3 scripts/gpu_run_summary.py "$RESULTS" "$LOG" >"$OUTDIR/summary.json" 2>>"$LOG"
cat "$OUTDIR/summary.json" | tee -a "$LOG"

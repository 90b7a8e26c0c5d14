#!/usr/bin/env bash
# Nightly evalkit run: the matrix, a markdown report to paste or mail and a self-contained HTML
# report to open or attach, an optional notification, and evalkit's own exit code so cron, CI or
# a wrapper can tell what happened.
#
#   MODEL=deepseek-v4 NOTIFY='mail -s "evalkit: $EVALKIT_HEADLINE" team@example.com < "$EVALKIT_REPORT"' \
#     examples/nightly.sh --limit 200
#
# Environment (all optional):
#   MODEL         config name for `evalkit matrix --model` (default: demo, the simulated engine)
#   RESULTS_DIR   where runs are stored (default: results)
#   REPORT        markdown output path (default: RESULTS_DIR/RUN_ID.md)
#   HTML_REPORT   HTML output path (default: REPORT with .html for .md; `none`: no HTML report).
#                 Best effort: a failed HTML report is logged and changes nothing else.
#   NOTIFY        a shell command run after the report is written; it sees EVALKIT_EXIT_CODE,
#                 EVALKIT_VERDICT, EVALKIT_HEADLINE (the report's first line: which cells broke,
#                 with the figures that show it; empty without a report), EVALKIT_RUN_ID,
#                 EVALKIT_REPORT, EVALKIT_HTML_REPORT (the HTML file, or /dev/null) and EVALKIT_RESULTS in its
#                 environment. A failing NOTIFY is reported on stderr and never changes the exit code.
#   NOTIFY_ON     `failure` (default: only when the exit code is not 0) or `always`
#   JUDGE         `on` (default): after the matrix, `evalkit history judge` holds every series'
#                 newest night against its own history (RESULTS_DIR/history.db) and writes its
#                 verdicts to RESULTS_DIR/RUN_ID.judge.txt (EVALKIT_JUDGE for NOTIFY); a series that
#                 regressed, failed intermittently or shifted makes a clean exit 1. `off`: skip it.
#   EVALKIT       the evalkit command (default: evalkit)
# Extra arguments go to `evalkit matrix` (e.g. --limit 200, --only parallel=dp8).
#
# Exit codes are evalkit's (see `evalkit --help`):
#   0 ok, 1 a failing threshold broke (or, with JUDGE, a series broke against its history),
#   2 bad input (nothing started), 3 a cell failed to run,
#   4 another evalkit run holds the device lock (nothing started),
#   130 interrupted (Ctrl-C or SIGTERM; finished cells are kept and reported).
set -uo pipefail

MODEL="${MODEL:-demo}"
RESULTS_DIR="${RESULTS_DIR:-results}"
NOTIFY="${NOTIFY:-}"
NOTIFY_ON="${NOTIFY_ON:-failure}"
JUDGE="${JUDGE:-on}"
EVALKIT="${EVALKIT:-evalkit}"
# An explicit run id, not `latest`: another run finishing meanwhile cannot swap the report.
RUN_ID="nightly-$(date -u +%Y%m%d-%H%M%S)-${MODEL//[^A-Za-z0-9_.-]/-}"
REPORT="${REPORT:-$RESULTS_DIR/$RUN_ID.md}"
HTML_REPORT="${HTML_REPORT:-${REPORT%.md}.html}"

verdict() {
    case "$1" in
        0) echo "ok" ;;
        1) echo "threshold broken" ;;
        2) echo "bad input" ;;
        3) echo "a cell failed" ;;
        4) echo "device lock held" ;;
        130) echo "interrupted" ;;
        *) echo "unexpected exit $1" ;;
    esac
}

log() { printf '[%s] nightly: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# evalkit runs in the background so a signal to this script (cron's timeout, systemd, a CI
# cancel, Ctrl-C) reaches it. It is forwarded as SIGTERM, which evalkit treats like Ctrl-C: it
# stops the engine, keeps finished cells and exits 130. (SIGINT would not do: a background job
# of a script starts with SIGINT ignored.)
child=""
signalled=0
forward() {
    signalled=1
    log "got $1, stopping evalkit"
    [ -n "$child" ] && kill -s TERM "$child" 2>/dev/null
}
trap 'forward TERM' TERM
trap 'forward INT' INT

log "evalkit matrix --model $MODEL, run $RUN_ID"
"$EVALKIT" matrix --model "$MODEL" --run-id "$RUN_ID" --results-dir "$RESULTS_DIR" --quiet "$@" &
child=$!
wait "$child"
code=$?
# A trapped signal ends `wait` early (status 128+n) while evalkit is still stopping: wait again
# for its own status.
while [ "$signalled" -eq 1 ] && [ "$code" -gt 128 ] && kill -0 "$child" 2>/dev/null; do
    wait "$child"
    code=$?
done
if [ "$signalled" -eq 1 ] && [ "$code" -gt 128 ]; then
    wait "$child" 2>/dev/null  # already reaped by the shell: its saved status
    last=$?
    [ "$last" -ne 127 ] && code=$last
fi
if [ "$signalled" -eq 1 ] && [ "$code" -ne 130 ] && [ "$code" -gt 128 ]; then
    code=130  # killed before its own handler was installed: still an interruption
fi
child=""
trap 'log "interrupted while reporting"; exit 130' TERM INT

if [ "$code" -eq 2 ] || [ "$code" -eq 4 ]; then
    log "$(verdict "$code") (exit $code): nothing was started, no report"
    report_written=0
elif "$EVALKIT" report "$RUN_ID" --results-dir "$RESULTS_DIR" --format markdown > "$REPORT.tmp" \
        && mv "$REPORT.tmp" "$REPORT"; then
    report_written=1
    log "report: $REPORT"
else
    rm -f "$REPORT.tmp"
    report_written=0
    log "could not write the report for $RUN_ID"
fi
html_written=0
if [ "$report_written" -eq 1 ] && [ "$HTML_REPORT" != none ]; then
    rm -f "$HTML_REPORT"
    if "$EVALKIT" report "$RUN_ID" --results-dir "$RESULTS_DIR" --format html -o "$HTML_REPORT" > /dev/null \
            && [ -s "$HTML_REPORT" ]; then
        html_written=1
        log "html report: $HTML_REPORT"
    else
        log "could not write the HTML report for $RUN_ID (the exit code stays $code)"
    fi
fi
judge_file=/dev/null
if [ "$JUDGE" != off ] && { [ "$code" -eq 0 ] || [ "$code" -eq 1 ] || [ "$code" -eq 3 ]; } \
        && mkdir -p "$RESULTS_DIR"; then
    judge_file="$RESULTS_DIR/$RUN_ID.judge.txt"
    "$EVALKIT" history judge --results-dir "$RESULTS_DIR" > "$judge_file"
    judged=$?
    if [ "$judged" -eq 1 ]; then
        log "history judge: a series broke against its own history ($judge_file)"
        [ "$code" -eq 0 ] && code=1
    elif [ "$judged" -ne 0 ]; then
        log "history judge could not judge (exit $judged; the exit code stays $code)"
    fi
fi
headline=""
if [ "$report_written" -eq 1 ]; then
    headline="$("$EVALKIT" report "$RUN_ID" --results-dir "$RESULTS_DIR" --format headline 2>/dev/null)"
fi
log "exit $code ($(verdict "$code"))${headline:+: $headline}"

if [ -n "$NOTIFY" ] && { [ "$NOTIFY_ON" = always ] || [ "$code" -ne 0 ]; }; then
    export EVALKIT_EXIT_CODE="$code" EVALKIT_VERDICT="$(verdict "$code")" EVALKIT_HEADLINE="$headline" EVALKIT_RUN_ID="$RUN_ID" \
        EVALKIT_RESULTS="$RESULTS_DIR/$RUN_ID" EVALKIT_JUDGE="$judge_file"
    if [ "$report_written" -eq 1 ]; then export EVALKIT_REPORT="$REPORT"; else export EVALKIT_REPORT=/dev/null; fi
    if [ "$html_written" -eq 1 ]; then export EVALKIT_HTML_REPORT="$HTML_REPORT"; else export EVALKIT_HTML_REPORT=/dev/null; fi
    if ! sh -c "$NOTIFY"; then
        log "NOTIFY failed (the exit code stays $code)"
    fi
fi
exit "$code"

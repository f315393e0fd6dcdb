#!/usr/bin/env bash
# rerun-missing.sh: finish a run. The prompts that still lack a good answer
# in its generation files (they failed, were aborted, or were never reached
# because the run was killed) are listed by merge --missing, answered again
# by infer, and everything is merged into one record per prompt:
#
#   merge --prompts PROMPTS --missing GEN... RERUN > TODO     # the to-do list
#   infer -e ENDPOINTS --resume -o RERUN TODO                 # ROUNDS times at most
#   merge --prompts PROMPTS GEN... RERUN -o OUT --errors ERRORS; stats OUT
#
# Usage:
#   PROMPTS=gen.prompts.jsonl pipelines/rerun-missing.sh gen.jsonl
#   PROMPTS=prompts.jsonl OUT=final.jsonl ROUNDS=3 pipelines/rerun-missing.sh sharded/shard-*.gen.jsonl
#
# Running it again is safe: RERUN is continued, never overwritten, and OUT
# is rebuilt from all the answers there are.
#
# Variables (defaults in brackets):
#   PROMPTS     the run's prompt file (generate.sh keeps it as
#               gen.prompts.jsonl) [required]
#   ENDPOINTS   inference servers [127.0.0.1:30000-30007]
#   OUT         the merged generation records [final.jsonl]
#   ERRORS      the prompts still without a good answer, with their last
#               error [OUT with .jsonl replaced by .errors.jsonl]
#   RERUN       the new answers [OUT with .jsonl replaced by .rerun.jsonl]
#   TODO        the latest to-do list [OUT with .jsonl replaced by .todo.jsonl]
#   ROUNDS      how many times to answer the to-do list while it is not empty;
#               0 only merges and lists what is missing [1]
#   INFER_ARGS  extra infer flags, split on white space []
#   MERGE_ARGS  extra flags for every merge, e.g. '--drop-length' to rerun
#               answers cut at the token limit, '--samples 4' for a run
#               made with infer --samples 4 []
#   STATS_ARGS  extra stats flags []
#   BIN         directory holding the tokenmill binaries [found on PATH]
#
# Exit status: 0 when every prompt has a good answer, 3 when some still lack
# one (they are in TODO, and in ERRORS with their reason), 1 on a failure.
set -euo pipefail

[ -n "${BIN:-}" ] && PATH="$(cd "$BIN" && pwd):$PATH"
PROMPTS=${PROMPTS:?set PROMPTS to the run\'s prompt file}
ENDPOINTS=${ENDPOINTS:-127.0.0.1:30000-30007}
OUT=${OUT:-final.jsonl}
ERRORS=${ERRORS:-${OUT%.jsonl}.errors.jsonl}
RERUN=${RERUN:-${OUT%.jsonl}.rerun.jsonl}
TODO=${TODO:-${OUT%.jsonl}.todo.jsonl}
ROUNDS=${ROUNDS:-1}
read -ra infer_args <<<"${INFER_ARGS:-}"
read -ra merge_args <<<"${MERGE_ARGS:-}"
read -ra stats_args <<<"${STATS_ARGS:-}"
rerun_errors=${RERUN%.jsonl}.errors.jsonl

if [ $# = 0 ]; then
  echo "usage: PROMPTS=prompts.jsonl [ENDPOINTS=...] [OUT=final.jsonl] $0 GENERATION_FILE..." >&2
  exit 2
fi
for tool in infer merge stats; do
  command -v "$tool" >/dev/null || { echo "rerun-missing.sh: $tool not found: build the tools (go build -o bin/ ./cmd/...) and set BIN=bin" >&2; exit 1; }
done

# answers: the generation files given, and the reruns so far.
answers() {
  printf '%s\0' "$@"
  [ -e "$RERUN" ] && printf '%s\0' "$RERUN"
  return 0
}

status=0
for ((round = 1; ; round++)); do
  mapfile -d '' inputs < <(answers "$@")
  merge --prompts "$PROMPTS" --missing --force -o "$TODO" "${merge_args[@]}" "${inputs[@]}"
  todo=$(wc -l <"$TODO")
  todo=${todo// /}
  if [ "$todo" = 0 ]; then
    echo "rerun-missing.sh: every prompt has a good answer" >&2
    break
  fi
  if ((round > ROUNDS)); then
    echo "rerun-missing.sh: $todo prompts lack a good answer after $ROUNDS rounds: listed in $TODO, with their errors in $ERRORS" >&2
    status=3
    break
  fi
  echo "rerun-missing.sh: round $round: answering $todo prompts into $RERUN" >&2
  infer --endpoints "$ENDPOINTS" --resume -o "$RERUN" --errors "$rerun_errors" "${infer_args[@]}" "$TODO" || {
    s=$?
    # 3 means some prompts failed again: the next round takes them.
    if [ "$s" != 3 ]; then
      echo "rerun-missing.sh: infer failed (exit $s); merging what there is" >&2
      status=$s
      break
    fi
  }
done

mapfile -d '' inputs < <(answers "$@")
[ -s "$rerun_errors" ] && inputs+=("$rerun_errors")
merge --prompts "$PROMPTS" --force -o "$OUT" --errors "$ERRORS" "${merge_args[@]}" "${inputs[@]}"
files=("$OUT")
[ -s "$ERRORS" ] && files+=("$ERRORS")
stats "${stats_args[@]}" "${files[@]}"
exit "$status"

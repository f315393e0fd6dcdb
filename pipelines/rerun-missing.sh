#!/usr/bin/env bash
# rerun-missing.sh: finish a run. The prompts that still lack a good answer
# in its generation files (they failed, were aborted, were never reached
# because the run was killed, or their answers failed filter's quality
# checks) are listed by merge --missing, answered again by infer, and
# everything is merged into one record per prompt:
#
#   filter --rejects UNFIT GEN... RERUN                       # the unfit answers
#   merge --prompts PROMPTS --missing GEN... RERUN UNFIT > TODO   # the to-do list
#   infer -e ENDPOINTS --append -o RERUN --seed-offset R*K TODO  # round R, ROUNDS at most
#   merge --prompts PROMPTS GEN... RERUN UNFIT -o OUT --errors ERRORS; stats OUT
#
# Each round asks for exactly what TODO lists, the prompts a fit answer
# was already written for included: infer --append adds to RERUN without
# skipping what it holds (--resume would skip an unfit answer's prompt for
# good), and merge keeps the best answer there is.
# Usage:
#   PROMPTS=gen.prompts.jsonl pipelines/rerun-missing.sh gen.jsonl
#   PROMPTS=prompts.jsonl OUT=final.jsonl ROUNDS=3 pipelines/rerun-missing.sh sharded/shard-*.gen.jsonl
#
# Running it again is safe: RERUN is continued, never overwritten, and UNFIT
# and OUT are rebuilt from all the answers there are. An answer filter
# rejected is never in OUT; a rerun's fit answer for its prompt is. Round r
# passes infer --seed-offset r*K (K: the --samples of MERGE_ARGS, else of
# INFER_ARGS, else 1), r counting on from the rounds run before (kept in
# RERUN with .jsonl replaced by .rounds), so with a --seed (and a sampling
# temperature) each round samples other answers than the run and every
# round before it: an answer that looped is not asked for with the seed that
# made it loop. The to-do list names each missing sample, so the rounds ask
# for one answer per line (infer --samples 1).
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
#   UNFIT       every answer that fails the checks, with its reason
#               [OUT with .jsonl replaced by .unfit.jsonl]
#   FILTER      0: no quality checks (only missing answers are rerun) [1]
#   FILTER_ARGS extra filter flags, e.g. '--checks default,lang' []
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
# one (they are in TODO, and in ERRORS with their error or filter's reject),
# 1 on a failure.
set -euo pipefail

[ -n "${BIN:-}" ] && PATH="$(cd "$BIN" && pwd):$PATH"
PROMPTS=${PROMPTS:?set PROMPTS to the run\'s prompt file}
ENDPOINTS=${ENDPOINTS:-127.0.0.1:30000-30007}
OUT=${OUT:-final.jsonl}
ERRORS=${ERRORS:-${OUT%.jsonl}.errors.jsonl}
RERUN=${RERUN:-${OUT%.jsonl}.rerun.jsonl}
TODO=${TODO:-${OUT%.jsonl}.todo.jsonl}
UNFIT=${UNFIT:-${OUT%.jsonl}.unfit.jsonl}
FILTER=${FILTER:-1}
ROUNDS=${ROUNDS:-1}
read -ra infer_args <<<"${INFER_ARGS:-}"
read -ra filter_args <<<"${FILTER_ARGS:-}"
read -ra merge_args <<<"${MERGE_ARGS:-}"
read -ra stats_args <<<"${STATS_ARGS:-}"
rerun_errors=${RERUN%.jsonl}.errors.jsonl
rounds_file=${RERUN%.jsonl}.rounds

# samples: the run's samples per prompt (--samples of MERGE_ARGS, else of
# INFER_ARGS, else 1), the seeds one round takes up.
samples=1
for args in "${infer_args[*]}" "${merge_args[*]}"; do
  read -ra words <<<"$args"
  for ((i = 0; i < ${#words[@]}; i++)); do
    case ${words[i]} in
    --samples) samples=${words[i + 1]:-1} ;;
    --samples=*) samples=${words[i]#--samples=} ;;
    esac
  done
done

if [ $# = 0 ]; then
  echo "usage: PROMPTS=prompts.jsonl [ENDPOINTS=...] [OUT=final.jsonl] $0 GENERATION_FILE..." >&2
  exit 2
fi
tools=(infer merge stats)
[ "$FILTER" != 0 ] && tools+=(filter)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "rerun-missing.sh: $tool not found: build the tools (go build -o bin/ ./cmd/...) and set BIN=bin" >&2; exit 1; }
done

# answers: the generation files given, and the reruns so far.
answers() {
  printf '%s\0' "$@"
  [ -e "$RERUN" ] && printf '%s\0' "$RERUN"
  return 0
}

# check: every answer there is through filter, its unfit ones into UNFIT;
# sets inputs to the answers, and UNFIT, for merge.
check() {
  mapfile -d '' inputs < <(answers "$@")
  [ "$FILTER" != 0 ] || return 0
  local s=0
  filter --force --progress 0 --rejects "$UNFIT" -o /dev/null "${filter_args[@]}" "${inputs[@]}" || s=$?
  # 3: bad lines, reported by filter (and by merge below); the rest checked.
  if [ "$s" != 0 ] && [ "$s" != 3 ]; then
    echo "rerun-missing.sh: filter failed (exit $s)" >&2
    exit "$s"
  fi
  inputs+=("$UNFIT")
}

# before: the rounds run by earlier runs of this script on RERUN.
before=0
[ -s "$rounds_file" ] && before=$(<"$rounds_file")
case $before in
'' | *[!0-9]*) echo "rerun-missing.sh: $rounds_file does not hold a number of rounds: remove it or name another RERUN" >&2; exit 1 ;;
esac

status=0
for ((round = 1; ; round++)); do
  check "$@"
  merge --prompts "$PROMPTS" --missing --force -o "$TODO" --samples "$samples" "${merge_args[@]}" "${inputs[@]}"
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
  r=$((before + round))
  printf '%s\n' "$r" >"$rounds_file.tmp" && mv -f "$rounds_file.tmp" "$rounds_file"
  echo "rerun-missing.sh: round $round (seed offset $((r * samples))): answering $todo prompts into $RERUN" >&2
  infer --endpoints "$ENDPOINTS" --append -o "$RERUN" --errors "$rerun_errors" --seed-offset $((r * samples)) "${infer_args[@]}" --samples 1 "$TODO" || {
    s=$?
    # 3 means some prompts failed again: the next round takes them.
    if [ "$s" != 3 ]; then
      echo "rerun-missing.sh: infer failed (exit $s); merging what there is" >&2
      status=$s
      break
    fi
  }
done

check "$@"
[ -s "$rerun_errors" ] && inputs+=("$rerun_errors")
merge --prompts "$PROMPTS" --force -o "$OUT" --errors "$ERRORS" --samples "$samples" "${merge_args[@]}" "${inputs[@]}"
files=("$OUT")
[ -s "$ERRORS" ] && files+=("$ERRORS")
stats "${stats_args[@]}" "${files[@]}"
exit "$status"

#!/usr/bin/env bash
# generate.sh: the whole job on one machine. Prompts are pulled out of the
# datasets, repeats dropped, the rest answered by a fleet of inference
# servers, the answers checked, and the result summarised:
#
#   extract DATASETS | dedup -o PROMPTS;  infer -e ENDPOINTS -o OUT PROMPTS
#   filter --rejects UNFIT -o FIT OUT;  stats OUT ERRORS
#
# The prompt file is written whole (and atomically) before the first request,
# so that after a crash or Ctrl-C it still lists every prompt, which is what
# rerun-missing.sh and merge --prompts need. PROMPTS= (empty) streams instead:
#
#   extract DATASETS | dedup | infer -e ENDPOINTS -o OUT;  filter ...;  stats OUT ERRORS
#
# Usage:
#   ENDPOINTS=127.0.0.1:30000-30007 pipelines/generate.sh data/0625/*.parquet
#   OUT=run1/gen.jsonl INFER_ARGS='--max-tokens 4096' pipelines/generate.sh a.jsonl b.parquet
#
# Run it again with RESUME=1 after a crash or Ctrl-C: prompts already answered
# in OUT are skipped. Prompts that still failed are in ERRORS, and answers
# that failed the quality checks in UNFIT; rerun both with rerun-missing.sh.
# FIT and UNFIT are rebuilt from OUT on every run.
#
# Variables (defaults in brackets):
#   ENDPOINTS    inference servers, as infer --endpoints takes them
#                (host:port, host:first-last, URLs, comma-separated)
#                [127.0.0.1:30000-30007]
#   ENDPOINTS_FILE  instead of ENDPOINTS: the endpoints file serve writes (or
#                a directory of them, one per node), which infer follows as
#                servers come and go, e.g. tokenmill-serve/endpoints.txt;
#                generation waits for it to list a server first []
#   WAIT_SERVERS seconds to wait for that [3600]
#   OUT          generation records [gen.jsonl]
#   ERRORS       error records of prompts that could not be answered
#                [OUT with .jsonl replaced by .errors.jsonl]
#   PROMPTS      the deduplicated prompts, kept for rerun-missing.sh and
#                merge --prompts; empty: stream them into infer, keeping none
#                [OUT with .jsonl replaced by .prompts.jsonl]
#   FIT          the records of OUT whose answers pass filter's checks
#                [OUT with .jsonl replaced by .fit.jsonl]
#   UNFIT        the others, each with its reason (filter --rejects)
#                [OUT with .jsonl replaced by .unfit.jsonl]
#   FILTER       0: skip the quality checks (no FIT, no UNFIT) [1]
#   RESUME       1: continue OUT (infer --resume) instead of refusing to
#                overwrite it [0]
#   EXTRACT_ARGS, DEDUP_ARGS, INFER_ARGS, FILTER_ARGS, STATS_ARGS
#                extra flags for each tool, split on white space, e.g.
#                EXTRACT_ARGS='--lang en --source ii-0625',
#                FILTER_ARGS='--checks default,lang'. Every flag also
#                has an environment variable (TOKENMILL_INFER_MAX_TOKENS=...)
#                for values that contain spaces. []
#   BIN          directory holding the tokenmill binaries [found on PATH]
#
# Exit status: that of the pipeline (0, or 3 when records were rejected or
# prompts failed: see the stats and the ERRORS file), after the stats.
# Unfit answers do not change it.
set -euo pipefail

[ -n "${BIN:-}" ] && PATH="$(cd "$BIN" && pwd):$PATH"
ENDPOINTS=${ENDPOINTS:-127.0.0.1:30000-30007}
servers=(--endpoints "$ENDPOINTS")
[ -n "${ENDPOINTS_FILE:-}" ] && servers=(--endpoints-file "$ENDPOINTS_FILE")
OUT=${OUT:-gen.jsonl}
ERRORS=${ERRORS:-${OUT%.jsonl}.errors.jsonl}
PROMPTS=${PROMPTS-${OUT%.jsonl}.prompts.jsonl}
FIT=${FIT:-${OUT%.jsonl}.fit.jsonl}
UNFIT=${UNFIT:-${OUT%.jsonl}.unfit.jsonl}
FILTER=${FILTER:-1}
RESUME=${RESUME:-0}
read -ra extract_args <<<"${EXTRACT_ARGS:-}"
read -ra dedup_args <<<"${DEDUP_ARGS:-}"
read -ra infer_args <<<"${INFER_ARGS:-}"
read -ra filter_args <<<"${FILTER_ARGS:-}"
read -ra stats_args <<<"${STATS_ARGS:-}"

if [ $# = 0 ]; then
  echo "usage: [ENDPOINTS=...] [OUT=gen.jsonl] $0 DATASET..." >&2
  exit 2
fi
for tool in extract dedup infer filter stats; do
  command -v "$tool" >/dev/null || { echo "generate.sh: $tool not found: build the tools (go build -o bin/ ./cmd/...) and set BIN=bin" >&2; exit 1; }
done
[ "$RESUME" = 1 ] && infer_args+=(--resume)
# serve's servers may still be loading: wait for the first one listed.
if [ -n "${ENDPOINTS_FILE:-}" ]; then
  waited=0
  until grep -qsh '^http' "$ENDPOINTS_FILE" "$ENDPOINTS_FILE"/*.txt; do
    if ((waited >= ${WAIT_SERVERS:-3600})); then
      echo "generate.sh: no server listed in $ENDPOINTS_FILE after ${waited}s (is serve running? serve status says)" >&2
      exit 1
    fi
    ((waited % 30 == 0)) && echo "generate.sh: waiting for serve to list a ready server in $ENDPOINTS_FILE" >&2
    sleep 1
    waited=$((waited + 1))
  done
fi

# The run's wall time lets stats report the fleet's tok/s over the run.
now_us() { local t=${EPOCHREALTIME:-}; if [ -n "$t" ]; then echo "${t/[.,]/}"; else echo "$(date +%s)000000"; fi; }
start=$(now_us)
status=0
if [ -n "$PROMPTS" ]; then
  # A rerun rebuilds the prompt file from the same datasets (--force).
  extract "${extract_args[@]}" "$@" | dedup "${dedup_args[@]}" --force -o "$PROMPTS" || status=$?
  # 3: records rejected, the rest kept; anything else: no prompt file.
  if [ "$status" = 0 ] || [ "$status" = 3 ]; then
    infer "${servers[@]}" -o "$OUT" --errors "$ERRORS" "${infer_args[@]}" "$PROMPTS" || status=$?
  fi
else
  extract "${extract_args[@]}" "$@" |
    dedup "${dedup_args[@]}" |
    infer "${servers[@]}" -o "$OUT" --errors "$ERRORS" "${infer_args[@]}" ||
    status=$?
fi
wall="$((($(now_us) - start) / 1000))ms"
[ -e "$OUT" ] || exit "$status"

files=("$OUT")
[ -s "$ERRORS" ] && files+=("$ERRORS")
echo "generate.sh: ${files[*]} written in $wall, exit status $status" >&2
if [ "$FILTER" != 0 ]; then
  # Derived from OUT alone, so rebuilt (--force) on every run.
  filter --force --progress 0 --rejects "$UNFIT" -o "$FIT" "${filter_args[@]}" "$OUT" || { s=$?; [ "$status" != 0 ] || status=$s; }
  echo "generate.sh: answers that pass the checks in $FIT, the others in $UNFIT (rerun-missing.sh asks for them again)" >&2
fi
stats --wall "$wall" "${stats_args[@]}" "${files[@]}" || { s=$?; [ "$status" != 0 ] || status=$s; }
exit "$status"

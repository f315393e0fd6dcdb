#!/usr/bin/env bash
# sharded.sh: one prompt file answered by several machines at once, with GNU
# parallel as the engine. The prompts are split into SHARDS stable parts
# (shard: by a hash of the id); each part's infer runs as a job on one of
# HOSTS (over ssh, or here); the parts' answers are merged into one file.
#
#   shard -n SHARDS PROMPTS                                       # here
#   infer -e ENDPOINTS -o shard-K.gen.jsonl shard-K.jsonl         # a job per shard, on HOSTS
#   merge --prompts PROMPTS shard-*.gen.jsonl ... -o OUT; stats OUT      # here
#
# Usage:
#   SHARDS=4 pipelines/sharded.sh prompts.jsonl        # 4 jobs on this machine
#   HOSTS=gpu1,gpu2,gpu3,gpu4 SHARDS=4 WORK=/nfs/run1 BIN=/nfs/tokenmill/bin \
#     pipelines/sharded.sh prompts.jsonl               # one job per host
#   HOSTS=gpu1,gpu2 TRANSFER=1 SHARDS=8 pipelines/sharded.sh prompts.jsonl
#
# Every host needs the tokenmill binaries (at BIN, or on the PATH of its ssh
# login), passwordless ssh from here, and access to ENDPOINTS. ENDPOINTS is
# read on each host, so 127.0.0.1:30000-30007 means that host's own servers.
# Either WORK is on a filesystem every host mounts at the same path (NFS, a
# cluster's shared home: the default), or TRANSFER=1 has parallel copy each
# shard to its host and the answers back (needs rsync on every host).
#
# Run it again after a failure: each shard's infer continues its output
# (--resume) when WORK is shared (keep SHARDS the same); or answer what is
# missing here with rerun-missing.sh (PROMPTS=prompts.jsonl, WORK/gen.jsonl).
#
# Variables (defaults in brackets):
#   HOSTS       where jobs run, as parallel --sshlogin takes it: host names,
#               user@host, N/host for N job slots (one where no N/ is
#               given), ':' for this machine, comma-separated; empty when
#               PARALLEL_ARGS names them (--sshloginfile: there a line
#               without N/ gets parallel's default, a slot per CPU)
#               [SHARDS/: , i.e. SHARDS slots here, so the shards run at once]
#   JOBS        job slots on every host, over the N/ of HOSTS (parallel -j)
#               [unset: the N/ of each host]
#   SHARDS      number of shards, one infer job each [4]
#   ENDPOINTS   inference servers, as seen from each host [127.0.0.1:30000-30007]
#   ENDPOINTS_FILE  instead of ENDPOINTS: endpoints files serve writes, read
#               on each host and followed as servers come and go; with
#               serve-hosts.sh, WORK/endpoints (needs a shared WORK) []
#   WORK        directory for the shards and their answers [sharded]
#   TRANSFER    1: copy shards to the hosts and answers back; parallel then
#               runs in WORK, so name files in PARALLEL_ARGS by absolute paths [0]
#   OUT         the merged generation records [WORK/gen.jsonl]
#   ERRORS      the prompts without a good answer, with their last error
#               [OUT with .jsonl replaced by .errors.jsonl]; the prompts
#               themselves are listed in OUT's .todo.jsonl, for rerun-missing.sh
#   INFER_ARGS, MERGE_ARGS, STATS_ARGS, PARALLEL_ARGS
#               extra flags, split on white space (e.g. HOSTS= PARALLEL_ARGS=
#               '--sshloginfile hosts.txt'). TOKENMILL_* variables set here are
#               passed on to every host (parallel --env). The merge and stats
#               are rerun-missing.sh's with ROUNDS=0 []
#   BIN         directory holding the binaries, the same on every host [PATH]
#
# Exit status: 0 when every prompt has a good answer, 3 when some lack one
# (a shard's job failed, or left failed prompts: see the jobs' messages), 1
# when the merge failed. The merge runs whatever the jobs did.
set -euo pipefail

[ -n "${BIN:-}" ] && BIN=$(cd "$BIN" && pwd) && PATH="$BIN:$PATH"
SHARDS=${SHARDS:-4}
HOSTS=${HOSTS-$SHARDS/:}
JOBS=${JOBS:-}
ENDPOINTS=${ENDPOINTS:-127.0.0.1:30000-30007}
servers=(--endpoints "$ENDPOINTS")
[ -n "${ENDPOINTS_FILE:-}" ] && servers=(--endpoints-file "$ENDPOINTS_FILE")
WORK=${WORK:-sharded}
TRANSFER=${TRANSFER:-0}
read -ra infer_args <<<"${INFER_ARGS:-}"
read -ra parallel_args <<<"${PARALLEL_ARGS:-}"

if [ $# != 1 ]; then
  echo "usage: [HOSTS=...] [SHARDS=4] [WORK=sharded] $0 PROMPTS" >&2
  exit 2
fi
command -v parallel >/dev/null || { echo "sharded.sh: GNU parallel not found (Debian/Ubuntu: apt-get install parallel)" >&2; exit 1; }
for tool in shard infer merge stats; do
  command -v "$tool" >/dev/null || { echo "sharded.sh: $tool not found: build the tools (go build -o bin/ ./cmd/...) and set BIN=bin" >&2; exit 1; }
done
prompts=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
OUT=${OUT:-$WORK/gen.jsonl}
ERRORS=${ERRORS:-${OUT%.jsonl}.errors.jsonl}

# Shards are a pure function of the prompts and SHARDS, so writing them
# again (--force) on a rerun gives the same parts the earlier answers belong to.
shard -n "$SHARDS" -o "$WORK/shard-{i}.jsonl" --force "$prompts"

infer=infer
[ -n "${BIN:-}" ] && infer=$BIN/infer
# Each host runs as many jobs at once as its N/ says, one where it says
# none ([@group/][N/]login); JOBS, when set, overrides them all.
if [ -n "$HOSTS" ]; then
  logins=()
  IFS=, read -ra entries <<<"$HOSTS"
  for h in "${entries[@]}"; do
    if [[ ! $h =~ ^(@[^/]*/)?[0-9]+/ && ! $h =~ ^@[^/]*$ ]]; then
      [[ $h =~ ^(@[^/]*/)(.*)$ ]] && h="${BASH_REMATCH[1]}1/${BASH_REMATCH[2]}" || h="1/$h"
    fi
    logins+=("$h")
  done
  parallel_args+=(--sshlogin "$(IFS=,; echo "${logins[*]}")")
fi
jobs_args=()
[ -n "$JOBS" ] && jobs_args=(-j "$JOBS")
env_args=()
for v in $(compgen -e); do
  case $v in TOKENMILL_*) env_args+=(--env "$v") ;; esac
done
# The job as a shell command; parallel quotes what it puts in for {} and {.}.
job="$(printf '%q ' "$infer" "${servers[@]}" --resume "${infer_args[@]}")-o {.}.gen.jsonl --errors {.}.errors.jsonl {}"
shards=()
if [ "$TRANSFER" = 1 ]; then
  # Names relative to WORK, where parallel runs (so files named in
  # PARALLEL_ARGS must then be absolute): each shard is copied into
  # a scratch directory on its host, the job runs there and both outputs
  # come back beside the shard (the errors file made empty when infer wrote
  # none, so that rsync finds it).
  for ((k = 0; k < SHARDS; k++)); do shards+=("shard-$k.jsonl"); done
  job="$job; s=\$?; touch {.}.errors.jsonl; exit \$s"
  parallel_args+=(--workdir ... --transferfile {} --return {.}.gen.jsonl --return {.}.errors.jsonl --cleanup)
else
  for ((k = 0; k < SHARDS; k++)); do shards+=("$WORK/shard-$k.jsonl"); done
fi

status=0
(if [ "$TRANSFER" = 1 ]; then cd "$WORK"; fi
  parallel "${jobs_args[@]}" --tag --line-buffer --halt never "${env_args[@]}" "${parallel_args[@]}" "$job" ::: "${shards[@]}") ||
  status=$?
[ "$status" = 0 ] || echo "sharded.sh: $status of $SHARDS shard jobs failed or left failed prompts; merging what there is" >&2

files=()
for ((k = 0; k < SHARDS; k++)); do
  for f in "$WORK/shard-$k.gen.jsonl" "$WORK/shard-$k.errors.jsonl"; do
    if [ -e "$f" ]; then files+=("$f"); fi
  done
done
if [ ${#files[@]} = 0 ]; then
  echo "sharded.sh: no shard job wrote anything: see the jobs' messages above" >&2
  exit 1
fi
# rerun-missing.sh with no rounds: merge, list what lacks an answer, stats;
# its exit status is the run's. Without quality checks unless FILTER=1: a
# later rerun-missing.sh of the whole run checks the answers.
FILTER=${FILTER:-0} PROMPTS=$prompts OUT=$OUT ERRORS=$ERRORS ROUNDS=0 exec bash "$(dirname "$0")/rerun-missing.sh" "${files[@]}"

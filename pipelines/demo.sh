#!/usr/bin/env bash
# demo.sh: the whole job end to end on this machine, in about a minute, with
# nothing but Go and bash. It builds the tools into BIN, starts a simulated
# SGLang fleet (llmsim) of 8 endpoints on 127.0.0.1:30000-30007 running
# DEMO_TIME_SCALE times faster than real GPUs, runs generate.sh (extract |
# dedup | infer, then stats) on a 1,200-row sample in the Infinity-Instruct
# layout, and stops the fleet when done, failed or interrupted.
#
# Usage:
#   bash pipelines/demo.sh
#   DEMO_PORT_BASE=21000 bash pipelines/demo.sh        # ports 30000-30007 taken
#   DEMO_LLMSIM_ARGS='--fail-rate 0.05' bash pipelines/demo.sh   # with faults
#
# Variables (defaults in brackets):
#   DEMO_PORT_BASE    first port of the fleet [30000]
#   DEMO_ENDPOINTS    number of simulated servers [8]
#   DEMO_TIME_SCALE   how much faster than real time the fleet runs [15]
#   DEMO_LLMSIM_ARGS  extra llmsim flags, split on white space []
#   DEMO_DATA         dataset to run [testdata/demo/infinity-instruct-sample.parquet]
#   DEMO_DIR          where the outputs go (gen.jsonl, gen.errors.jsonl,
#                     gen.prompts.jsonl, llmsim.log), replaced on each run
#                     [${TMPDIR:-/tmp}/tokenmill-demo]
#   BIN               where the tools are built [bin in the repository]
#   EXTRACT_ARGS, DEDUP_ARGS, INFER_ARGS, STATS_ARGS: as in generate.sh
#
# Exit status: generate.sh's (0 ok, 3 some prompts failed), 1 when the build
# or the fleet failed, 130 when interrupted.
set -euo pipefail

root=$(cd -P "$(dirname "$0")/.." && pwd) # -P: the repository, also through a linked pipelines/
BIN=${BIN:-$root/bin}
DEMO_PORT_BASE=${DEMO_PORT_BASE:-30000}
DEMO_ENDPOINTS=${DEMO_ENDPOINTS:-8}
DEMO_TIME_SCALE=${DEMO_TIME_SCALE:-15}
DEMO_DATA=${DEMO_DATA:-$root/testdata/demo/infinity-instruct-sample.parquet}
DEMO_DIR=${DEMO_DIR:-${TMPDIR:-/tmp}/tokenmill-demo}
read -ra llmsim_args <<<"${DEMO_LLMSIM_ARGS:-}"
first=$DEMO_PORT_BASE
last=$((DEMO_PORT_BASE + DEMO_ENDPOINTS - 1))
say() { echo "demo.sh: $*" >&2; }

command -v go >/dev/null || { say "go is not on PATH: install Go 1.26 from https://go.dev/dl/"; exit 1; }
say "building the tools into $BIN"
mkdir -p "$BIN"
BIN=$(cd "$BIN" && pwd)
# -buildvcs=auto: --version names the commit even where GOFLAGS says
# -buildvcs=false.
(cd "$root" && go build -buildvcs=auto -o "$BIN/" ./cmd/...)

# A port that accepts a connection is taken; llmsim would fail on it anyway,
# but this says which one and names a base whose ports are all free.
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
first_taken() {
  local port
  for ((port = $1; port < $1 + DEMO_ENDPOINTS; port++)); do
    if taken "$port"; then echo "$port"; return 0; fi
  done
  return 1
}
if busy=$(first_taken "$first"); then
  say "port $busy on 127.0.0.1 is already in use (the fleet needs $first-$last);"
  # Bases below Linux's ephemeral ports (32768-60999), which connections
  # take as their own.
  for ((base = 21000; base <= 31000; base += 1000)); do
    if ! first_taken "$base" >/dev/null; then
      say "stop what listens there, or use free ports: DEMO_PORT_BASE=$base bash pipelines/demo.sh"
      exit 1
    fi
  done
  say "stop what listens there, or pick a DEMO_PORT_BASE whose $DEMO_ENDPOINTS ports are free"
  exit 1
fi

mkdir -p "$DEMO_DIR"
DEMO_DIR=$(cd "$DEMO_DIR" && pwd)
# Every output of an earlier run goes (gen.fit.jsonl, rerun files ...), so
# that nothing stale is taken for this run's.
rm -f "$DEMO_DIR"/gen*.jsonl "$DEMO_DIR"/gen*.jsonl.* "$DEMO_DIR"/llmsim.log "$DEMO_DIR"/llmsim.ready

# Each background job gets its own process group (set -m), so a Ctrl-C
# reaches this script alone; the traps then stop the jobs in order: the
# pipeline first (infer flushes what it has), then the fleet.
set -m
sim='' gen=''
stop_jobs() {
  set +m
  if [ -n "$gen" ] && kill -0 "$gen" 2>/dev/null; then
    say "stopping the pipeline"
    kill -INT -- "-$gen" 2>/dev/null || true
    wait "$gen" 2>/dev/null || true
  fi
  if [ -n "$sim" ] && kill -0 "$sim" 2>/dev/null; then
    say "stopping the fleet"
    kill -TERM "$sim" 2>/dev/null || true
    wait "$sim" 2>/dev/null || true
  fi
}
trap stop_jobs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting $DEMO_ENDPOINTS simulated servers on 127.0.0.1:$first-$last, $DEMO_TIME_SCALE times faster than real time"
"$BIN/llmsim" --listen "127.0.0.1:$first-$last" --time-scale "$DEMO_TIME_SCALE" \
  --ready-file "$DEMO_DIR/llmsim.ready" "${llmsim_args[@]}" </dev/null >"$DEMO_DIR/llmsim.log" 2>&1 &
sim=$!
for ((i = 0; i < 300; i++)); do
  [ -s "$DEMO_DIR/llmsim.ready" ] && break
  if ! kill -0 "$sim" 2>/dev/null; then
    say "the fleet did not start (ports $first-$last in use? try another DEMO_PORT_BASE, e.g. 21000); its log:"
    cat "$DEMO_DIR/llmsim.log" >&2
    exit 1
  fi
  sleep 0.1
done
[ -s "$DEMO_DIR/llmsim.ready" ] || { say "the fleet was not ready within 30 s; log in $DEMO_DIR/llmsim.log"; exit 1; }

say "running pipelines/generate.sh on $DEMO_DATA"
started=$SECONDS
status=0
BIN=$BIN ENDPOINTS="127.0.0.1:$first-$last" RESUME=0 OUT="$DEMO_DIR/gen.jsonl" \
  ERRORS="$DEMO_DIR/gen.errors.jsonl" PROMPTS="$DEMO_DIR/gen.prompts.jsonl" \
  EXTRACT_ARGS="--source infinity-instruct/0625 ${EXTRACT_ARGS:-}" \
  bash "$root/pipelines/generate.sh" "$DEMO_DATA" </dev/null &
gen=$!
wait "$gen" || status=$?
gen=''
say "done in $((SECONDS - started)) s (exit status $status); outputs in $DEMO_DIR"
exit "$status"

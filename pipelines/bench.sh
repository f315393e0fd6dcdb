#!/usr/bin/env bash
# bench.sh: measure every tokenmill tool next to what users would run
# instead, on the same files, in one run, and write BENCHMARKS.md.
#
#   bash pipelines/bench.sh               # or: just bench
#   BENCH_QUICK=1 bash pipelines/bench.sh # small sizes, a smoke test (~2 min)
#
# It builds the tools into $BENCH_DIR/bin, makes the data (a 660,000-record
# synthetic Infinity-Instruct corpus, its extracted prompts, generation
# records for them), times each command BENCH_RUNS times through
# `benchsuite time` (internal/cmd/benchsuite, internal/benchsuite: median wall time, CPU time, peak RSS),
# and renders the tables. The comparison tools it uses: jq, awk (and gawk
# if present), split, sort, curl with xargs, and the official OpenAI Node
# SDK (npm install openai into $BENCH_DIR/node). jq is installed with
# apt-get when missing and running as root; a tool that cannot be had is
# marked "not available" in its table, never left out silently.
#
# Variables (defaults in brackets):
#   BENCH_DIR     scratch directory: data, binaries, node modules, results
#                 [.bench in the repository, git-ignored]
#   BENCH_QUICK   1: small sizes, for a smoke test [0]
#   BENCH_RUNS    runs per measurement; the median is reported [5: short runs
#                 on a shared machine swing, and a median of 5 rides out one bad window]
#   BENCH_OUT     the report [BENCHMARKS.md in the repository; with
#                 BENCH_QUICK=1, $BENCH_DIR/BENCHMARKS.md]
#   BENCH_REUSE_DATA  1: keep data files made by an earlier run with the same
#                 sizes instead of making them again [0]
#   BENCH_ONLY    filter: measure filter alone and rewrite only the filter
#                 section of BENCH_OUT (BENCHMARKS.md), keeping the rest;
#                 servers: the same for the server sections (infer's adapted
#                 in-flight count against fixed ones on llmsim, and infer
#                 on a real Ollama server); regen: the same for infer
#                 --regenerate's section []
#   SERVERS_RUNS  runs per row of the llmsim server tables [3; 1 quick]
#
# Exit status: 0 when the report was written (targets missed are marked in
# it, not failures of the script), 1 when a measurement failed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BENCH_DIR=${BENCH_DIR:-$root/.bench}
BENCH_QUICK=${BENCH_QUICK:-0}
BENCH_RUNS=${BENCH_RUNS:-5}
BENCH_REUSE_DATA=${BENCH_REUSE_DATA:-0}
BENCH_ONLY=${BENCH_ONLY:-}
if [ "$BENCH_QUICK" = 1 ]; then
  BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/BENCHMARKS.md}
else
  BENCH_OUT=${BENCH_OUT:-$root/BENCHMARKS.md}
fi
say() { echo "bench.sh: $*" >&2; }

# Sizes. Full: the 660k corpus of the real job, the 1M-record growth
# point; jq's slurping variants (-s) read the first SLURP records only,
# since they hold the whole input in memory (GBs at 660k), and tokenmill
# is measured on the same subset for their ratios.
if [ "$BENCH_QUICK" = 1 ]; then
  SERVERS_RUNS=${SERVERS_RUNS:-1} SERVERS_MIN=2 OLLAMA_PROMPTS=40
  FILTER_BYTES=50000000 FILTER_LANG_BYTES=5000000
  N_MAIN=20000 N_BIG=40000 GROWTH="1000:1k 10000:10k 40000:40k"
  SLURP=5000 CLIENT_INFER=10000 CLIENT_NODE=3000 CLIENT_CURL=500
  FLEET_PROMPTS=1500 FLEET_RUNS=1 LLMSIM_BENCHTIME=20000x REGEN_CORPUS=600
else
  SERVERS_RUNS=${SERVERS_RUNS:-3} SERVERS_MIN=20 OLLAMA_PROMPTS=200
  FILTER_BYTES=1000000000 FILTER_LANG_BYTES=50000000
  N_MAIN=660000 N_BIG=1000000 GROWTH="10000:10k 100000:100k 1000000:1M"
  SLURP=100000 CLIENT_INFER=100000 CLIENT_NODE=20000 CLIENT_CURL=4000
  FLEET_PROMPTS=8000 FLEET_RUNS=3 LLMSIM_BENCHTIME=200000x REGEN_CORPUS=6000
fi
CONCURRENCY=64    # requests in flight, the same for every client
TIME_SCALE=20     # the fleet runs this many times faster than real GPUs
BIG_LABEL=${GROWTH##*:}
SMALL_LABEL=${GROWTH%% *}
SMALL_LABEL=${SMALL_LABEL#*:}

command -v go >/dev/null || { say "go is not on PATH: install Go 1.26 from https://go.dev/dl/"; exit 1; }
mkdir -p "$BENCH_DIR"
BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
cd "$BENCH_DIR"
mkdir -p bin data tmp node logs
export TMPDIR=$BENCH_DIR/tmp
export PATH="$BENCH_DIR/bin:$PATH"
results=$BENCH_DIR/results.jsonl
# How the repository is reached from here, in the commands shown.
repo_prefix="$root/"
[ "$BENCH_DIR" = "$root/.bench" ] && repo_prefix=../
rm -f "$results" logs/*
started=$SECONDS

# --- tools -------------------------------------------------------------
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
  else return 1
  fi
}
# jq is installed when missing (as root). gawk is not: installing it would
# switch the system's awk from mawk to gawk; it is measured when present.
if ! command -v jq >/dev/null; then
  say "installing jq with apt-get"
  if ! { as_root apt-get update -q && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends jq; } >logs/apt.log 2>&1; then
    say "could not install jq (logs/apt.log); its rows are marked not available"
  fi
fi
have() { command -v "$1" >/dev/null 2>&1; }
missing_why() { echo "$1 is not installed on this machine"; }

say "building the tools into $BENCH_DIR/bin"
(cd "$root" && go build -o "$BENCH_DIR/bin/" ./cmd/... ./internal/cmd/... && go build -o "$BENCH_DIR/bin/rusage" ./pipelines/bench/rusage &&
  go build -o "$BENCH_DIR/bin/filtergen" ./pipelines/bench/filtergen && go build -o "$BENCH_DIR/bin/ollamaserve" ./pipelines/bench/ollamaserve &&
  go build -o "$BENCH_DIR/bin/regenstats" ./pipelines/bench/regenstats)

# Node's OpenAI SDK, from pipelines/bench/package.json into node/.
node_ok=0 node_why=''
if [ -n "$BENCH_ONLY" ]; then
  node_why="not needed for BENCH_ONLY=$BENCH_ONLY"
elif ! have node || ! have npm; then
  node_why="node and npm are not installed"
elif [ -d node/node_modules/openai ] && cmp -s "$root/pipelines/bench/package.json" node/package.json; then
  node_ok=1
else
  say "installing the OpenAI Node SDK into $BENCH_DIR/node"
  cp "$root/pipelines/bench/package.json" node/package.json
  if (cd node && npm install --no-audit --no-fund --loglevel=error) >logs/npm.log 2>&1; then
    node_ok=1
  else
    node_why="npm install openai failed (see .bench/logs/npm.log)"
  fi
fi
openai_version=$( [ "$node_ok" = 1 ] && node -p "require('$BENCH_DIR/node/node_modules/openai/package.json').version" 2>/dev/null || echo "not installed")

pin=()
pin_note="not pinned (taskset is not installed)"
if have taskset; then pin=(taskset -c 0); pin_note="pinned to CPU 0 with taskset"; fi

load_before=$(uptime)
say "load before: $load_before"

# measure GROUP NAME [benchsuite time flags...] -- COMMAND...
measure() {
  local group=$1 name=$2
  shift 2
  benchsuite time --rusage "$BENCH_DIR/bin/rusage" --results "$results" --runs "$BENCH_RUNS" \
    --group "$group" --name "$name" --stderr "logs/$group-${name//[^A-Za-z0-9]/_}.err" "$@"
}
# unavailable GROUP NAME REASON: a row saying why it was not measured.
unavailable() {
  benchsuite time --results "$results" --group "$1" --name "$2" --unavailable "$3" -- true
}

# --- data ----------------------------------------------------------------
# make_data TARGET COMMAND...: run COMMAND (which writes TARGET), unless
# reusing data and TARGET.done says the same command made it.
make_data() {
  local target=$1
  shift
  if [ "$BENCH_REUSE_DATA" = 1 ] && [ -s "$target" ] && [ "$(cat "$target.done" 2>/dev/null)" = "$*" ]; then return; fi
  rm -f "$target.done"
  "$@"
  echo "$*" >"$target.done"
}
# splice_section FILE HEADING BEFORE: FILE replaces the section of BENCH_OUT
# whose heading starts with HEADING, or goes before the one starting with
# BEFORE (at the end if there is none).
splice_section() {
  [ -e "$BENCH_OUT" ] || echo "# Benchmarks" >"$BENCH_OUT"
  awk -v file="$1" -v heading="$2" -v before="$3" '
    function put(  l) { while ((getline l < file) > 0) print l; close(file); done = 1 }
    index($0, heading) == 1 { put(); skip = 1; next }
    skip && /^## / { skip = 0 }
    !done && index($0, before) == 1 { put() }
    !skip { print }
    END { if (!done) put() }
  ' "$BENCH_OUT" >"$BENCH_OUT.tmp"
  mv "$BENCH_OUT.tmp" "$BENCH_OUT"
}
# --- regenerating conversations (BENCH_ONLY=regen runs them alone) -------
# Eight calibrated llmsim endpoints (the default decode timing, prefill at
# REGEN_PREFILL_US), each with a prefix cache of REGEN_KV tokens, regenerate
# the same multi-turn conversations three ways: infer --regenerate
# (affinity), infer --regenerate --no-affinity, and specforge_regen.py, a
# client that does what SpecForge's scripts/regenerate_train_data.py does.
# llmsim's request log says what each run's prompts cost.
REGEN_SCALE=10  # the fleet runs this many times faster than real GPUs
# Prefill per prompt token, µs. llmsim's default (40 µs, 25,000 tokens/s) is
# not from the production job, and it is more than one GPU can compute for
# a 27B model: 2 FLOPs a parameter a token at 40 µs is 1.35 PFLOP/s, above
# an H100's dense BF16 peak (989 TFLOP/s). A real figure for the class:
# gemma-3-27b-it on vLLM (vllm-project/vllm pull request 33743, `vllm bench
# serve`, 16 prompts of 1,024 tokens at once) gave the 16,368 prompt tokens
# their first tokens after 4.2 s, about 3,900 tokens/s or 257 µs a token,
# while decoding at 46 ms a step with 16 running (llmsim: 38.7 ms). Prefill
# is what affinity saves, so this section is measured at 250 µs.
REGEN_PREFILL_US=250
# KV cache per endpoint, in tokens: about SGLang's max_total_num_tokens for
# a 27-32B model in FP8 on one 80 GB GPU.
REGEN_KV=300000
REGEN_MAX_TOKENS=1024
regen_data() {
  # Conversations of 3 to 5 questions: their later turns carry histories of
  # 2k tokens and more.
  if [ "$BENCH_REUSE_DATA" = 1 ] && [ -s data/regen.jsonl ] && [ "$(cat data/regen.jsonl.done 2>/dev/null)" = "$REGEN_CORPUS" ]; then return; fi
  corpus -n "$REGEN_CORPUS" --conversations --seed 1 2>>logs/data.log | extract --turns all --progress 0 2>>logs/data.log |
    jq -c 'select([.messages[] | select(.role == "user")] | length >= 3)' >data/regen.jsonl
  echo "$REGEN_CORPUS" >data/regen.jsonl.done
}
# regen_run NAME COMMAND...: COMMAND against a fresh fleet of 8 endpoints,
# its arguments {URLS} (the URLs, comma-separated) and {ADDRS} (host:port
# each, as separate arguments) filled in; its figures go to
# regen-results.jsonl.
regen_run() {
  local name=$1 log=tmp/regen-requests.jsonl pid start end a generated
  shift
  rm -f tmp/regen.urls "$log"
  llmsim --listen 127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0 \
    --ready-file tmp/regen.urls --time-scale "$REGEN_SCALE" --kv-tokens "$REGEN_KV" --prefill-per-token "${REGEN_PREFILL_US}us" \
    --cache-report --request-log "$log" --seed 1 </dev/null >tmp/regen-llmsim.log 2>&1 &
  pid=$!
  sim_pid=$pid # stopped by the EXIT trap if the script ends first
  for _ in $(seq 300); do
    [ -s tmp/regen.urls ] && break
    kill -0 "$pid" 2>/dev/null || { say "llmsim did not start: $BENCH_DIR/tmp/regen-llmsim.log"; exit 1; }
    sleep 0.1
  done
  local urls args=() addrs=()
  urls=$(paste -sd, tmp/regen.urls)
  mapfile -t addrs < <(sed 's#^http://##' tmp/regen.urls)
  for a in "$@"; do
    case $a in
    '{URLS}') args+=("$urls") ;;
    '{ADDRS}') args+=("${addrs[@]}") ;;
    *) args+=("$a") ;;
    esac
  done
  echo "== $name: ${args[*]}" >>logs/regen-client.log
  start=$(date +%s.%N)
  if ! "${args[@]}" </dev/null >>logs/regen-client.log 2>&1; then
    say "$name failed: logs/regen-client.log"
    kill -TERM "$pid"
    wait "$pid" || true
    exit 1
  fi
  end=$(date +%s.%N)
  kill -TERM "$pid"
  wait "$pid" || true
  sim_pid=''
  cat tmp/regen-llmsim.log >>logs/regen-llmsim.log
  # llmsim's exit summary: "... N tokens generated"
  generated=$(sed -n 's/.* \([0-9][0-9]*\) tokens generated.*/\1/p' tmp/regen-llmsim.log | tail -1)
  regenstats --name "$name" --wall "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" --scale "$REGEN_SCALE" \
    --generated "${generated:-0}" "$log" >>regen-results.jsonl
}
bench_regen() {
  say "regenerating $(lines data/regen.jsonl) conversations on 8 endpoints (time scale $REGEN_SCALE), three ways"
  rm -f regen-results.jsonl tmp/regen-a.jsonl* tmp/regen-b.jsonl* tmp/regen-c.jsonl tmp/regen-*.errors.jsonl
  # infer's waits are scaled like the fleet's, as in the fleet section.
  local waits=(--probe-interval "$((2000 / REGEN_SCALE))ms" --backoff "$((1000 / REGEN_SCALE))ms" --max-backoff "$((60000 / REGEN_SCALE))ms")
  regen_run "(a) infer --regenerate" infer --regenerate -e '{URLS}' --max-tokens "$REGEN_MAX_TOKENS" "${waits[@]}" \
    --progress 0 -o tmp/regen-a.jsonl data/regen.jsonl
  regen_run "(b) infer --regenerate --no-affinity" infer --regenerate --no-affinity -e '{URLS}' --max-tokens "$REGEN_MAX_TOKENS" \
    "${waits[@]}" --progress 0 -o tmp/regen-b.jsonl data/regen.jsonl
  if have python3; then
    regen_run "(c) specforge_regen.py" python3 "$root/pipelines/bench/specforge_regen.py" --server-address '{ADDRS}' --concurrency 64 \
      --max-tokens "$REGEN_MAX_TOKENS" --input-file-path data/regen.jsonl --output-file-path tmp/regen-c.jsonl
  else
    say "python3 is not installed: no SpecForge-style row"
  fi
}
regen_section() {
  local n turns history prompts rr
  n=$(lines data/regen.jsonl)
  turns=$(jq '[.messages[] | select(.role == "user")] | length' data/regen.jsonl | sort -n | uniq -c |
    awk '{ printf "%s%s with %d", sep, $1, $2; sep = ", " }')
  history=$(jq -r 'select(.later_turns > 0) | .history_tokens / .later_turns | floor' regen-results.jsonl | head -1)
  # Mean prompt by question, from the last run's request log (every run
  # sends the same prompts: llmsim's answers depend on the prompt alone).
  prompts=$(jq -r 'select(.status == 200) | [([.body.messages[] | select(.role == "user")] | length), .prompt_tokens] | @tsv' \
    tmp/regen-requests.jsonl | awk '{ s[$1] += $2; c[$1]++ } END { for (k in s) printf "%d %.0f\n", k, s[k] / c[k] }' |
    sort -n | awk '{ printf "%s%s %s", sep, ($1 == 1 ? "1st" : $1 == 2 ? "2nd" : $1 == 3 ? "3rd" : $1 "th"), $2; sep = ", " }')
  # (c) deals conversations round robin, in input order; (a)'s records say
  # how many tokens each conversation's answers took.
  rr=$(jq -r '[.id, (.output.usage.completion_tokens // 0)] | @tsv' tmp/regen-a.jsonl |
    awk -v eps=8 'NR == FNR { tok[$1] = $2; next }
      { s = (FNR - 1) % eps; load[s] += tok[$1]; total += tok[$1] }
      END { for (s in load) if (load[s] > most) most = load[s]; printf "%.1f", 100 * (most / (total / eps) - 1) }' \
      - <(jq -r .id data/regen.jsonl))
  cat <<EOF
## infer --regenerate: conversations on a calibrated fleet

\`corpus -n $REGEN_CORPUS --conversations --seed 1 | extract --turns all\`, the conversations of 3 to 5
questions ($(num "$n"): $turns questions), regenerated with \`--max-tokens $REGEN_MAX_TOKENS\` on eight
\`llmsim\` endpoints, $REGEN_SCALE times faster than real time, a fresh fleet for each client. Prompts average
$prompts tokens by question; a later turn's history averages $(num "$history") tokens.

The fleet: llmsim's decode calibration (48 slots; 26.5 tok/s alone and 1,180 tok/s with 48 running: a step
costs 37.7 ms plus 62.6 µs a running request), prefill at $REGEN_PREFILL_US µs a prompt token
(\`--prefill-per-token ${REGEN_PREFILL_US}us\`), and a prefix cache of $(num "$REGEN_KV") tokens each (\`--kv-tokens $REGEN_KV\`:
about what SGLang holds for a 27-32B model in FP8 on one 80 GB GPU; \`--cache-report\`). llmsim's default
prefill, 40 µs a token, is more than one GPU computes for a 27B model (2 FLOPs a parameter a token at
40 µs is 1.35 PFLOP/s; an H100's dense BF16 peak is 989 TFLOP/s); gemma-3-27b-it on vLLM, decoding at
46 ms a step with 16 running (llmsim: 38.7 ms), gave 16 prompts of 1,024 tokens sent at once their first
tokens after 4.2 s: about 3,900 prompt tokens/s, 257 µs a token (\`vllm bench serve\`, in vLLM's pull
request 33743). Wall time is simulated (real × $REGEN_SCALE), from the client's start to its exit. Token figures
come from llmsim's request log (\`pipelines/bench/regenstats\`): a turn's **history** is what its request
holds of earlier turns (its messages up to the last answer), all that a prefix cache can serve.

- **(a)** \`infer --regenerate\`: each conversation keeps its slot on the endpoint of its first turn.
- **(b)** \`infer --regenerate --no-affinity\`: each turn goes to the least loaded endpoint.
- **(c)** \`pipelines/bench/specforge_regen.py\`: what SpecForge's \`scripts/regenerate_train_data.py\` does
  (Python standard library): conversations dealt round robin to the servers, 64 in flight per server,
  each conversation's turns one after another in one thread on its server; no tools, no retries.

EOF
  regenstats --table --prefill-us "$REGEN_PREFILL_US" regen-results.jsonl
  cat <<EOF
- (c)'s round robin: by the answers (a) got, the busiest of the eight servers generates $rr% more tokens
  than the mean.

Reading the figures: what affinity saves is prefill, so the cost model bounds what it can win: no client is
faster than one whose cache serves every history, and that one is faster than a client with no cache
by at most the factor in the line on prefill's share. (b) sends each turn to whichever endpoint is least
loaded, which holds the conversation's history only by chance, and pays the prefill. (c) cannot lose
on the cache: SpecForge's script runs a conversation's turns in one thread against the server it was dealt,
so its caches serve the histories as (a)'s do, and 64 conversations a server keep the 48 slots full. What
can separate (a) from (c) is the round robin's imbalance and the end of the run, when the last
conversations' turns run one after another on a draining batch: (a) pays the drain too, and the column
"any client at most" is (c)'s wall time over the least time the work can take, so where it is below 1.3×
no client can meet that goal. What (a) has that (c) does not is correctness, not speed: retries on another
endpoint, tool calls paired with the records' results, resume by (id, sample) from the turn journal
(SpecForge's \`--resume\` counts output lines, so conversations that finished out of order are skipped or
repeated), and no per-server concurrency to choose.

EOF
}
# --- filter (functions: BENCH_ONLY=filter runs them alone) ---------------
filter_data() {
  make_data data/corpus.jsonl corpus --force -n "$N_MAIN" -o data/corpus.jsonl 2>>logs/data.log
  make_data data/filter-gens.jsonl filtergen --bytes "$FILTER_BYTES" -o data/filter-gens.jsonl data/corpus.jsonl 2>>logs/data.log
  head -c "$FILTER_LANG_BYTES" data/filter-gens.jsonl | sed '$d' >data/filter-gens-lang.jsonl
}
bench_filter() {
  say "filter"
  local f=data/filter-gens.jsonl l=data/filter-gens-lang.jsonl nf nl
  nf=$(lines $f)
  nl=$(lines $l)
  measure filter filter --ours --bytes-of $f --records "$nf" -- filter --progress 0 $f
  measure filter "filter --workers 1" --bytes-of $f --records "$nf" --note "one core" -- filter --progress 0 --workers 1 $f
  if have python3; then
    measure filter "python3 filter_gopher.py" --bytes-of $f --records "$nf" --alias "$root/=$repo_prefix" \
      --note "the same checks in Python $(python3 -c 'import sys; print(sys.version.split()[0])'), one process" -- \
      python3 "$root/pipelines/bench/filter_gopher.py" $f
  else unavailable filter "python3 filter_gopher.py" "$(missing_why python3)"; fi
  measure filter-lang "filter --checks default,lang" --ours --bytes-of $l --records "$nl" \
    --note "language identification with whatlanggo" -- filter --progress 0 --checks default,lang $l
  measure filter-lang "filter (default checks)" --bytes-of $l --records "$nl" -- filter --progress 0 $l
}
filter_targets=(
  "filter ≥ 200 MB/s (default checks) := filter/filter:mbps >= 200"
)
filter_section() {
  cat <<EOF
## filter: quality checks

\`filtergen --bytes $FILTER_BYTES -o data/filter-gens.jsonl data/corpus.jsonl\`
(pipelines/bench/filtergen): $(num "$(lines data/filter-gens.jsonl)") generation records,
$(mb data/filter-gens.jsonl): prompts from the corpus, answers made of its assistant turns
(prose, lists, code, CJK; median about 2 kB), a fifth with reasoning, and 2.5% degenerate
(cut at the limit, looping, empty, reasoning only, thinking markers left in). filter runs its
default checks (length, reasoning_only, empty, think_residue, tool_call, loop);
\`filter_gopher.py\` (pipelines/bench) is the same checks, definitions and thresholds in Python,
and keeps exactly the records filter keeps (TestPythonTwin in lib/filter).

EOF
  table --group filter
  cat <<EOF

Language identification (\`--checks default,lang\`) is slower, and measured apart on the first
$((FILTER_LANG_BYTES / 1000000)) MB of the same file:

EOF
  table --group filter-lang
}
# --- servers (functions: BENCH_ONLY=servers runs them alone) --------------
# infer's in-flight count, adapted to servers that do not report their
# capacity, next to fixed ones, on llmsim's Ollama flavour (no capacity, no
# metrics: only latency and output to go on). Each case is
# key|label|llmsim flags|prompts|max tokens|fixed --concurrency levels; runs
# last about SERVERS_MIN minutes of simulated time at SERVERS_SCALE.
SERVERS_SCALE=50
servers_cases=(
  "4|4 slots|--flavor ollama --max-running 4|$((SERVERS_MIN * 55))|128|2 4 8 64"
  "48|48 slots|--flavor ollama --max-running 48|$((SERVERS_MIN * 300))|256|32 48 64"
  "schedule|48 slots, then 16 from $((SERVERS_MIN * 15)) s on|--flavor ollama --slots-schedule 0s:48,$((SERVERS_MIN * 15))s:16|$((SERVERS_MIN * 150))|256|16 48 64"
)
servers_data() {
  make_data data/servers-corpus.jsonl corpus --force -n 10000 -o data/servers-corpus.jsonl 2>>logs/data.log
  make_data data/servers-prompts.jsonl extract --force --progress 0 -o data/servers-prompts.jsonl data/servers-corpus.jsonl 2>>logs/data.log
}
# in_turns ROUNDS FUNCTION: FUNCTION measures every row of a table once
# (with measure); it is called ROUNDS times, so that each row's runs are
# spread over the same minutes as the others' and a shared machine's load
# falls on every row alike, and the rounds' runs of a row are merged into
# one result (its load: the mean of the rounds').
in_turns() {
  local rounds=$1 fn=$2 saved_results=$results saved_runs=$BENCH_RUNS r
  if ! have jq; then # no merging: each row's runs one after another
    BENCH_RUNS=$rounds
    "$fn"
    BENCH_RUNS=$saved_runs
    return
  fi
  results=$BENCH_DIR/tmp/turns.jsonl
  rm -f "$results"
  BENCH_RUNS=1
  for r in $(seq "$rounds"); do
    say "round $r of $rounds"
    "$fn"
  done
  results=$saved_results BENCH_RUNS=$saved_runs
  jq -c -s 'reduce .[] as $r ({o: [], m: {}}; ($r.group + "\u0000" + $r.name) as $k
      | if .m[$k] then .m[$k].runs += ($r.runs // []) | .m[$k].loads += [$r.load1]
        else .o += [$k] | .m[$k] = ($r + {loads: [$r.load1]}) end)
    | .o[] as $k | .m[$k] | .load1 = (.loads | add / length) | del(.loads)' "$BENCH_DIR/tmp/turns.jsonl" >>"$results"
}
servers_round() {
  local spec key label flags n tokens levels c sim="$root/pipelines/bench/sim-run"
  for spec in "${servers_cases[@]}"; do
    IFS='|' read -r key label flags n tokens levels <<<"$spec"
    say "servers: $label, $n prompts"
    # shellcheck disable=SC2086 # the flags are words
    measure "servers-$key" "infer (adapted)" --ours --records "$n" --clean tmp/servers-gen.jsonl --count tmp/servers-gen.jsonl \
      --alias "$root/=$repo_prefix" -- \
      "$sim" $flags --time-scale $SERVERS_SCALE -- infer -e @URL@ --max-tokens "$tokens" --progress 0 --force -o tmp/servers-gen.jsonl "data/servers-$key.jsonl"
    for c in $levels; do
      # shellcheck disable=SC2086
      measure "servers-$key" "infer --concurrency $c" --records "$n" --clean tmp/servers-gen.jsonl --count tmp/servers-gen.jsonl \
        --alias "$root/=$repo_prefix" -- \
        "$sim" $flags --time-scale $SERVERS_SCALE -- infer -e @URL@ --concurrency "$c" --max-tokens "$tokens" --progress 0 --force -o tmp/servers-gen.jsonl "data/servers-$key.jsonl"
    done
  done
}
bench_servers() {
  local spec key n
  for spec in "${servers_cases[@]}"; do
    IFS='|' read -r key _ _ n _ <<<"$spec"
    head -n "$n" data/servers-prompts.jsonl >"data/servers-$key.jsonl"
  done
  in_turns "$SERVERS_RUNS" servers_round
}
# servers_targets: adapted ≥ 95% of the best fixed level, per case (the
# best is found in the results); infer's defaults against the others on
# Ollama.
servers_targets() {
  local spec key label best
  for spec in "${servers_cases[@]}"; do
    IFS='|' read -r key label _ <<<"$spec"
    best=$(jq -rs --arg g "servers-$key" '[.[] | select(.group == $g and (.ours | not) and ((.runs // []) | length) > 0)]
      | map({name, w: ([.runs[].wall_ns] | sort | .[length / 2 | floor])}) | min_by(.w) | .name // empty' "$results" 2>/dev/null || true)
    if [ -n "$best" ]; then
      echo "adapted ≥ 95% of the best fixed ($label: $best) := servers-$key/infer (adapted):rps / servers-$key/$best:rps >= 0.95"
    fi
  done
  echo "on Ollama, infer's defaults ≥ infer --concurrency 4 := ollama/infer (defaults):rps / ollama/infer --concurrency 4:rps >= 1"
  echo "on Ollama, infer's defaults ≥ xargs -P 4 curl := ollama/infer (defaults):rps / ollama/xargs -P 4 curl:rps >= 1"
  echo "on Ollama, infer's defaults ≥ the OpenAI Node SDK at 4 := ollama/infer (defaults):rps / ollama/OpenAI Node SDK, 4 at once:rps >= 1"
}
# A real Ollama server (internal/ollamaserver: Ollama v0.6.5 on the CPU, its tiny
# random-weight model, OLLAMA_NUM_PARALLEL=4), held up by ollamaserve.
# (Ollama's answers end in a newline: curl needs no -w.)
real_alpaca="$root/../shared/data/real/alpaca_en_demo.json"
bench_ollama() {
  local n=$OLLAMA_PROMPTS url model pid why r
  # Real instructions (Alpaca's, in ../shared/data/real), else the corpus's.
  if [ -s "$real_alpaca" ]; then
    # Whole, then cut: head closing the pipe early would kill dedup with
    # SIGPIPE, which pipefail and set -e turn into the script's silent end.
    extract --progress 0 "$real_alpaca" 2>>logs/data.log | dedup 2>>logs/data.log >data/ollama-alpaca.jsonl
    head -n "$n" data/ollama-alpaca.jsonl >data/ollama-prompts.jsonl
  else
    head -n "$n" data/servers-prompts.jsonl >data/ollama-prompts.jsonl
  fi
  n=$(lines data/ollama-prompts.jsonl)
  rm -f tmp/ollama.ready
  ollamaserve --ready-file tmp/ollama.ready </dev/null 2>logs/ollamaserve.log &
  pid=$!
  for _ in $(seq 600); do
    [ -s tmp/ollama.ready ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ ! -s tmp/ollama.ready ]; then
    why="no Ollama server: $(tail -n 1 logs/ollamaserve.log)"
    say "$why"
    for r in "infer (defaults)" "infer --concurrency 4" "xargs -P 4 curl" "OpenAI Node SDK, 4 at once"; do unavailable ollama "$r" "$why"; done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return
  fi
  url=$(sed -n 1p tmp/ollama.ready)
  model=$(sed -n 2p tmp/ollama.ready)
  say "a real Ollama server at $url, $n prompts"
  if have jq && have curl && have xargs; then
    jq -c --arg m "$model" '{model: $m, messages, max_tokens: 32}' data/ollama-prompts.jsonl | awk 'length($0) < 100000' >data/ollama-curl-bodies.jsonl
  fi
  ollama_url=$url ollama_model=$model
  in_turns 5 ollama_round
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
ollama_round() {
  local n url=$ollama_url model=$ollama_model
  n=$(lines data/ollama-prompts.jsonl)
  measure ollama "infer (defaults)" --ours --records "$n" --clean tmp/ollama-gen.jsonl --count tmp/ollama-gen.jsonl --alias "$url=\$URL" -- \
    infer -e "$url" --max-tokens 32 --progress 0 --force -o tmp/ollama-gen.jsonl data/ollama-prompts.jsonl
  measure ollama "infer --concurrency 4" --records "$n" --clean tmp/ollama-gen.jsonl --count tmp/ollama-gen.jsonl --alias "$url=\$URL" -- \
    infer -e "$url" --concurrency 4 --max-tokens 32 --progress 0 --force -o tmp/ollama-gen.jsonl data/ollama-prompts.jsonl
  if have jq && have curl && have xargs; then
    measure ollama "xargs -P 4 curl" --records "$(lines data/ollama-curl-bodies.jsonl)" --stdin data/ollama-curl-bodies.jsonl \
      --alias "$url=\$URL" --show "xargs -d '\\n' -P 4 -n 1 curl -sS --fail -H 'Content-Type: application/json' \$URL/v1/chat/completions --data-binary < data/ollama-curl-bodies.jsonl" -- \
      xargs -d '\n' -P 4 -n 1 curl -sS --fail -H 'Content-Type: application/json' "$url/v1/chat/completions" --data-binary
  else unavailable ollama "xargs -P 4 curl" "$(missing_why "jq, curl or xargs")"; fi
  if [ "$node_ok" = 1 ]; then
    measure ollama "OpenAI Node SDK, 4 at once" --records "$n" --alias "$url=\$URL" --alias "$BENCH_DIR/=" --alias "$root/=$repo_prefix" -- \
      node "$root/pipelines/bench/openai-client.mjs" --modules "$BENCH_DIR/node" --base-url "$url/v1" --model "$model" \
      --concurrency 4 --max-tokens 32 data/ollama-prompts.jsonl
  else unavailable ollama "OpenAI Node SDK, 4 at once" "$node_why"; fi
}
servers_section() {
  local spec key label flags n tokens levels
  cat <<EOF
## infer's in-flight count on servers that do not say their capacity

A server that does not report how many requests it runs at once (vLLM, Ollama, gateways) gets an
in-flight count that infer adapts while the run goes (see Balancing in the README). Here it is next to
fixed \`--concurrency\` levels on llmsim's Ollama flavour, which reports neither its capacity nor a queue
(only latency and output to go on), $SERVERS_SCALE times faster than real time, each run on a fresh
simulator (\`pipelines/bench/sim-run\`); prompts from the corpus, answers cut at max_tokens. Each row is
the median of $SERVERS_RUNS runs, taken in turns (one run of every row, then the next round, so that the
machine's load falls on every row alike); "tokenmill is" compares the adapted count with each fixed one
(every run writes the same tokens, so the rate of answers is the rate of tokens). The goal: at least 95% of
the best fixed level's rate in every case. Wall times include the simulator's start (the same for every
row).

EOF
  for spec in "${servers_cases[@]}"; do
    IFS='|' read -r key label flags n tokens levels <<<"$spec"
    printf '### %s (%s prompts, max_tokens %s)\n\n' "$label" "$(num "$n")" "$tokens"
    table --group "servers-$key" --rate "answers/s"
    echo
  done
  cat <<EOF
## infer on a real Ollama server

Ollama v0.6.5 on this machine's CPU (\`internal/ollamaserver\`, held up by \`pipelines/bench/ollamaserve\`), serving
its tiny random-weight model with \`OLLAMA_NUM_PARALLEL=4\`; the same $(num "$(lines data/ollama-prompts.jsonl)") prompts for every
client (the first of Alpaca's English instructions, \`../shared/data/real/alpaca_en_demo.json\`, through
extract and dedup), 32 tokens each (the tiny model always runs to max_tokens), 5 runs in turns as above,
the median reported. infer with its defaults finds Ollama ready on \`/v1/models\` and adapts its in-flight
count; the others keep 4 requests in flight, Ollama's slots.

EOF
  table --group ollama --cpu-per-record --rate "answers/s"
}
if [ "$BENCH_ONLY" = servers ]; then
  lines() { wc -l <"$1" | tr -d ' '; }
  num() { echo "$1" | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }
  table() { benchsuite table --results "$results" "$@"; }
  (cd "$root" && go build -o "$BENCH_DIR/bin/ollamaserve" ./pipelines/bench/ollamaserve)
  node_ok=0 node_why="node and npm are not installed"
  if have node && have npm; then
    if [ -d node/node_modules/openai ] && cmp -s "$root/pipelines/bench/package.json" node/package.json; then node_ok=1
    else
      cp "$root/pipelines/bench/package.json" node/package.json
      if (cd node && npm install --no-audit --no-fund --loglevel=error) >logs/npm.log 2>&1; then node_ok=1
      else node_why="npm install openai failed (see .bench/logs/npm.log)"; fi
    fi
  fi
  say "making the data for the server tables"
  servers_data
  bench_servers
  bench_ollama
  section=$BENCH_DIR/servers-section.md
  t_args=()
  while IFS= read -r t; do t_args+=(--target "$t"); done < <(servers_targets)
  {
    servers_section
    echo
    echo "Measured alone (\`BENCH_ONLY=servers bash pipelines/bench.sh\`) on $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "load before \`$load_before\`, after \`$(uptime)\`."
    echo
    benchsuite targets --results "$results" "${t_args[@]}"
    echo
  } >"$section"
  # The sections replace the old ones, or go before the growth section.
  [ -e "$BENCH_OUT" ] || echo "# Benchmarks" >"$BENCH_OUT"
  awk -v file="$section" '
    function put(  l) { while ((getline l < file) > 0) print l; close(file); done = 1 }
    /^## infer.s in-flight count on servers/ || /^## infer on a real Ollama server/ { if (!done) put(); skip = 1; next }
    skip && /^## / { skip = 0 }
    !done && !skip && /^## Cost as the input grows/ { put() }
    !skip { print }
    END { if (!done) put() }
  ' "$BENCH_OUT" >"$BENCH_OUT.tmp"
  mv "$BENCH_OUT.tmp" "$BENCH_OUT"
  say "wrote the server sections of $BENCH_OUT"
  exit 0
fi

if [ "$BENCH_ONLY" = regen ]; then
  lines() { wc -l <"$1" | tr -d ' '; }
  num() { echo "$1" | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }
  have jq || { say "BENCH_ONLY=regen needs jq"; exit 1; }
  sim_pid=''
  trap '[ -z "$sim_pid" ] || kill -TERM "$sim_pid" 2>/dev/null || true' EXIT
  say "making the conversations"
  regen_data
  bench_regen
  section=$BENCH_DIR/regen-section.md
  {
    regen_section
    echo "Measured alone (\`BENCH_ONLY=regen bash pipelines/bench.sh\`) on $(date -u '+%Y-%m-%d %H:%M UTC'), one run each;"
    echo "load before \`$load_before\`, after \`$(uptime)\`."
    echo
  } >"$section"
  splice_section "$section" "## infer --regenerate: " "## Cost as the input grows"
  say "wrote the regenerate section of $BENCH_OUT"
  exit 0
fi
if [ "$BENCH_ONLY" = filter ]; then
  lines() { wc -l <"$1" | tr -d ' '; }
  num() { echo "$1" | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }
  mb() { echo "$(($(stat -c %s "$1") / 1000000)) MB"; }
  table() { benchsuite table --results "$results" "$@"; }
  say "making the data for filter"
  filter_data
  bench_filter
  section=$BENCH_DIR/filter-section.md
  t_args=()
  for t in "${filter_targets[@]}"; do t_args+=(--target "$t"); done
  {
    filter_section
    echo
    echo "Measured alone (\`BENCH_ONLY=filter bash pipelines/bench.sh\`) on $(date -u '+%Y-%m-%d %H:%M UTC'), $BENCH_RUNS runs each,"
    echo "median reported; load before \`$load_before\`, after \`$(uptime)\`."
    echo
    benchsuite targets --results "$results" "${t_args[@]}"
    echo
  } >"$section"
  splice_section "$section" "## filter: " "## infer: client overhead"
  say "wrote the filter section of $BENCH_OUT"
  exit 0
fi

say "making the data (corpus of $N_MAIN and $N_BIG records, prompts, generations)"
make_data data/corpus.jsonl corpus --force -n "$N_MAIN" -o data/corpus.jsonl 2>>logs/data.log
make_data data/prompts.jsonl extract --force --progress 0 -o data/prompts.jsonl data/corpus.jsonl 2>>logs/data.log
make_data data/gens.jsonl benchsuite generations --rerun data/rerun.jsonl -o data/gens.jsonl data/prompts.jsonl 2>>logs/data.log
head -n "$SLURP" data/prompts.jsonl >data/prompts-slurp.jsonl
benchsuite generations --rerun data/rerun-slurp.jsonl -o data/gens-slurp.jsonl data/prompts-slurp.jsonl 2>>logs/data.log
make_data data/corpus-big.jsonl corpus --force -n "$N_BIG" -o data/corpus-big.jsonl 2>>logs/data.log
make_data data/prompts-big.jsonl extract --force --progress 0 -o data/prompts-big.jsonl data/corpus-big.jsonl 2>>logs/data.log

lines() { wc -l <"$1" | tr -d ' '; }
# num 658671 -> 658,671
num() { echo "$1" | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }
n_corpus=$(lines data/corpus.jsonl)
n_prompts=$(lines data/prompts.jsonl)
n_gens=$(($(lines data/gens.jsonl) + $(lines data/rerun.jsonl)))
n_gens_only=$(lines data/gens.jsonl)
n_slurp_gens=$(($(lines data/gens-slurp.jsonl) + $(lines data/rerun-slurp.jsonl)))

# --- extract -------------------------------------------------------------
say "extract"
jq_extract='{id, messages:[{role:"user",content:.conversations[0].value}]}'
measure extract "extract, 1 core" --ours --bytes-of data/corpus.jsonl --records "$n_corpus" -- "${pin[@]}" extract data/corpus.jsonl
measure extract "extract, all $(nproc) cores" --ours --bytes-of data/corpus.jsonl --records "$n_corpus" -- extract data/corpus.jsonl
if have jq; then
  measure extract "jq, 1 core" --bytes-of data/corpus.jsonl --records "$n_corpus" -- "${pin[@]}" jq -c "$jq_extract" data/corpus.jsonl
else unavailable extract "jq, 1 core" "$(missing_why jq)"; fi

# --- dedup ---------------------------------------------------------------
say "dedup"
measure dedup dedup --ours --bytes-of data/prompts.jsonl --records "$n_prompts" -- dedup data/prompts.jsonl
measure dedup "dedup --exact" --ours --bytes-of data/prompts.jsonl --records "$n_prompts" -- dedup --exact data/prompts.jsonl
measure dedup "awk" --bytes-of data/prompts.jsonl --records "$n_prompts" --note "compares whole lines, ids included, so it drops no repeated prompt" -- awk '!seen[$0]++' data/prompts.jsonl
if have gawk; then
  measure dedup "gawk" --bytes-of data/prompts.jsonl --records "$n_prompts" --note "whole lines, as awk" -- gawk '!seen[$0]++' data/prompts.jsonl
else unavailable dedup gawk "$(missing_why gawk); awk here is $(readlink -f "$(command -v awk)")"; fi
if have jq; then
  measure dedup "jq + sort" --bytes-of data/prompts.jsonl --records "$n_prompts" --shell \
    --note "keeps the first of each prompt, written in key order, not input order" -- \
    "jq -r '\"\\(.messages|tojson)\\t\\(tojson)\"' data/prompts.jsonl | LC_ALL=C sort -s -t \$'\\t' -k1,1 -u | cut -f2-"
  measure dedup "dedup, first $SLURP" --ours --bytes-of data/prompts-slurp.jsonl --records "$SLURP" -- dedup data/prompts-slurp.jsonl
  measure dedup "jq -s unique_by, first $SLURP" --bytes-of data/prompts-slurp.jsonl --records "$SLURP" -- jq -c -s 'unique_by(.messages)[]' data/prompts-slurp.jsonl
else
  unavailable dedup "jq + sort" "$(missing_why jq)"
  unavailable dedup "jq -s unique_by" "$(missing_why jq)"
fi

# --- shard ---------------------------------------------------------------
say "shard"
measure shard shard --ours --bytes-of data/prompts.jsonl --records "$n_prompts" --mkdir tmp/shards --count 'tmp/shards/*' -- \
  shard -n 8 -o 'tmp/shards/part-{i}.jsonl' data/prompts.jsonl
measure shard "shard --by round-robin" --ours --bytes-of data/prompts.jsonl --records "$n_prompts" --mkdir tmp/shards --count 'tmp/shards/*' -- \
  shard -n 8 --by round-robin -o 'tmp/shards/part-{i}.jsonl' data/prompts.jsonl
measure shard "split -n l/8" --bytes-of data/prompts.jsonl --records "$n_prompts" --mkdir tmp/shards --count 'tmp/shards/*' \
  --note "8 runs of consecutive lines: a record's shard changes with the file" -- split -n l/8 data/prompts.jsonl tmp/shards/part-
measure shard "awk round-robin" --bytes-of data/prompts.jsonl --records "$n_prompts" --mkdir tmp/shards --count 'tmp/shards/*' -- \
  awk '{ print > ("tmp/shards/part-" NR % 8) }' data/prompts.jsonl

# --- merge ---------------------------------------------------------------
say "merge"
measure merge merge --ours --bytes-of data/gens.jsonl --bytes-of data/rerun.jsonl --records "$n_gens" -- merge data/gens.jsonl data/rerun.jsonl
measure merge "merge --sort" --ours --bytes-of data/gens.jsonl --bytes-of data/rerun.jsonl --records "$n_gens" -- merge --sort data/gens.jsonl data/rerun.jsonl
measure merge "merge, first $SLURP" --ours --bytes-of data/gens-slurp.jsonl --bytes-of data/rerun-slurp.jsonl --records "$n_slurp_gens" -- \
  merge data/gens-slurp.jsonl data/rerun-slurp.jsonl
if have jq; then
  measure merge "jq -s group_by, first $SLURP" --bytes-of data/gens-slurp.jsonl --bytes-of data/rerun-slurp.jsonl --records "$n_slurp_gens" \
    --note "the last record of each id wins: right here, since the rerun comes last and holds only better answers" -- \
    jq -c -s 'group_by(.id) | map(last)[]' data/gens-slurp.jsonl data/rerun-slurp.jsonl
else unavailable merge "jq -s group_by" "$(missing_why jq)"; fi

# --- stats ---------------------------------------------------------------
say "stats"
jq_pct='{n: length, p50: .[length*0.5|floor], p90: .[length*0.9|floor], p99: .[length*0.99|floor], max: .[-1]}'
awk_pct='{ v[NR] = $1 } END { print "n", NR, "p50", v[int(NR*0.5)+1], "p90", v[int(NR*0.9)+1], "p99", v[int(NR*0.99)+1], "max", v[NR] }'
measure stats stats --ours --bytes-of data/gens.jsonl --records "$n_gens_only" --no-count -- stats data/gens.jsonl
measure stats "stats --json" --ours --bytes-of data/gens.jsonl --records "$n_gens_only" --no-count -- stats --json data/gens.jsonl
measure stats "stats, first $SLURP" --ours --bytes-of data/gens-slurp.jsonl --records "$SLURP" --no-count -- stats data/gens-slurp.jsonl
if have jq; then
  measure stats "jq + sort + awk" --bytes-of data/gens.jsonl --records "$n_gens_only" --no-count --shell \
    --note "answer length percentiles alone; stats reports much more" -- \
    "jq '.output.usage.completion_tokens // empty' data/gens.jsonl | LC_ALL=C sort -n | awk '$awk_pct'"
  measure stats "jq -s, first $SLURP" --bytes-of data/gens-slurp.jsonl --records "$SLURP" --no-count \
    --note "answer length percentiles alone" -- \
    jq -s "[.[].output.usage.completion_tokens // empty] | sort | $jq_pct" data/gens-slurp.jsonl
else
  unavailable stats "jq + sort + awk" "$(missing_why jq)"
  unavailable stats "jq -s" "$(missing_why jq)"
fi

filter_data
bench_filter

# --- background llmsim ---------------------------------------------------
sim_pid=''
stop_sim() {
  if [ -n "$sim_pid" ] && kill -0 "$sim_pid" 2>/dev/null; then
    kill -TERM "$sim_pid" 2>/dev/null || true
    wait "$sim_pid" 2>/dev/null || true
  fi
  sim_pid=''
}
trap stop_sim EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# start_sim: one zero-latency endpoint; sets sim_url.
start_sim() {
  rm -f tmp/llmsim.url
  llmsim --listen 127.0.0.1:0 --instant --ready-file tmp/llmsim.url </dev/null >>logs/llmsim.log 2>&1 &
  sim_pid=$!
  for _ in $(seq 300); do
    [ -s tmp/llmsim.url ] && break
    kill -0 "$sim_pid" 2>/dev/null || { say "llmsim did not start: logs/llmsim.log"; exit 1; }
    sleep 0.1
  done
  sim_url=$(head -n 1 tmp/llmsim.url)
}

# --- client overhead -----------------------------------------------------
say "infer's client overhead against a zero-latency llmsim"
head -n "$CLIENT_INFER" data/prompts-big.jsonl >data/client-infer.jsonl
head -n "$CLIENT_NODE" data/prompts-big.jsonl >data/client-node.jsonl
start_sim
out=tmp/client-gen.jsonl
measure client infer --ours --records "$CLIENT_INFER" --clean $out --clean tmp/client-gen.errors.jsonl --count $out --alias "$sim_url=\$URL" -- \
  infer -e "$sim_url" --concurrency $CONCURRENCY --max-tokens 16 --progress-interval 0 -o $out data/client-infer.jsonl
if [ "$node_ok" = 1 ]; then
  measure client "OpenAI Node SDK $openai_version" --records "$CLIENT_NODE" --alias "$sim_url=\$URL" --alias "$BENCH_DIR/=" --alias "$root/=$repo_prefix" -- \
    node "$root/pipelines/bench/openai-client.mjs" --modules "$BENCH_DIR/node" --base-url "$sim_url/v1" \
    --concurrency $CONCURRENCY --max-tokens 16 data/client-node.jsonl
else unavailable client "OpenAI Node SDK" "$node_why"; fi
if have jq && have curl && have xargs; then
  # Request bodies made beforehand, not timed; xargs passes each as one
  # argument, so bodies over 100 kB (the argument limit is 128 kB) are left out.
  head -n "$CLIENT_CURL" data/prompts-big.jsonl | jq -c "{model: \"Qwen3.6-27B\", messages, max_tokens: 16}" |
    awk 'length($0) < 100000' >data/client-curl-bodies.jsonl
  measure client "xargs -P $CONCURRENCY curl" --records "$(lines data/client-curl-bodies.jsonl)" --stdin data/client-curl-bodies.jsonl \
    --alias "$sim_url=\$URL" --show "xargs -d '\\n' -P $CONCURRENCY -n 1 curl -sS --fail -w '\\n' -H 'Content-Type: application/json' $sim_url/v1/chat/completions --data-binary < data/client-curl-bodies.jsonl" -- \
    xargs -d '\n' -P $CONCURRENCY -n 1 curl -sS --fail -w '\n' -H 'Content-Type: application/json' "$sim_url/v1/chat/completions" --data-binary
else unavailable client "xargs -P $CONCURRENCY curl" "$(missing_why "jq, curl or xargs")"; fi
stop_sim

say "llmsim alone (BenchmarkInstantChat)"
(cd "$root" && benchsuite gobench --results "$results" --group llmsim --name "llmsim --instant, 1 endpoint" --ours --metric req/s --as rps \
  --note "client and simulator in one process, 32 goroutines on one fasthttp client" -- \
  go test -run '^$' -bench '^BenchmarkInstantChat$' -benchtime "$LLMSIM_BENCHTIME" -count "$BENCH_RUNS" ./internal/llmsim/)

# --- fleet ---------------------------------------------------------------
say "infer on a simulated 8-endpoint fleet (time scale $TIME_SCALE), one endpoint 3x slower, one crashing"
head -n "$FLEET_PROMPTS" data/prompts-big.jsonl >data/fleet-prompts.jsonl
crash_after=$((FLEET_PROMPTS * 3 / 40)) # about half of that endpoint's share
fleet_faults=(--fault 7=slow:3 --fault "6=crash-after:$crash_after,restart-after:60s,startup-delay:20s")
# infer's waits are real time; scaled like the fleet's, so that probing and
# backoff cost what they would on real GPUs.
scaled() { echo "$(($1 / TIME_SCALE))ms"; }
fleet_infer=(--infer-args=--probe-interval "--infer-args=$(scaled 2000)" --infer-args=--backoff "--infer-args=$(scaled 1000)"
  --infer-args=--max-backoff "--infer-args=$(scaled 60000)")
for policy in least-outstanding round-robin; do
  benchsuite fleet --results "$results" --runs "$FLEET_RUNS" --time-scale $TIME_SCALE --policy $policy --max-tokens 1024 \
    --prompts data/fleet-prompts.jsonl --records "$FLEET_PROMPTS" "${fleet_faults[@]}" "${fleet_infer[@]}" 2>>logs/fleet.log
done

# --- servers ---------------------------------------------------------------
servers_data
bench_servers
bench_ollama
# --- regenerating conversations ------------------------------------------
if have jq; then
  regen_data
  bench_regen
fi

# --- growth --------------------------------------------------------------
say "peak RSS as the input grows: $GROWTH"
runs_saved=$BENCH_RUNS
BENCH_RUNS=1
start_sim
for spec in $GROWTH; do
  n=${spec%%:*} label=${spec##*:}
  c=data/corpus-big.jsonl p=data/prompts-big.jsonl g=data/gens-$label.jsonl r=data/rerun-$label.jsonl
  if [ "$n" != "$N_BIG" ]; then
    c=data/corpus-$label.jsonl p=data/prompts-$label.jsonl
    head -n "$n" data/corpus-big.jsonl >"$c"
    head -n "$n" data/prompts-big.jsonl >"$p"
  fi
  benchsuite generations --rerun "$r" -o "$g" "$p" 2>>logs/data.log
  ng=$(($(lines "$g") + $(lines "$r")))
  measure growth extract --size "$label" --bytes-of "$c" --records "$n" -- extract "$c"
  measure growth dedup --size "$label" --bytes-of "$p" --records "$n" -- dedup "$p"
  measure growth "dedup --exact" --size "$label" --bytes-of "$p" --records "$n" -- dedup --exact "$p"
  measure growth shard --size "$label" --bytes-of "$p" --records "$n" --mkdir tmp/shards --count 'tmp/shards/*' -- shard -n 8 -o 'tmp/shards/part-{i}.jsonl' "$p"
  measure growth merge --size "$label" --bytes-of "$g" --bytes-of "$r" --records "$ng" -- merge "$g" "$r"
  measure growth stats --size "$label" --bytes-of "$g" --records "$(lines "$g")" --no-count -- stats "$g"
  measure growth infer --size "$label" --records "$n" --clean tmp/growth-gen.jsonl --clean tmp/growth-gen.errors.jsonl --count tmp/growth-gen.jsonl \
    --alias "$sim_url=\$URL" -- infer -e "$sim_url" --concurrency $CONCURRENCY --max-tokens 16 --progress-interval 0 -o tmp/growth-gen.jsonl "$p"
  measure growth "awk '!seen[\$0]++'" --size "$label" --bytes-of "$p" --records "$n" -- awk '!seen[$0]++' "$p"
  rm -f "$g" "$r"
  [ "$n" = "$N_BIG" ] || rm -f "$c" "$p"
done
stop_sim
BENCH_RUNS=$runs_saved

load_after=$(uptime)
say "load after: $load_after"
elapsed=$((SECONDS - started))

# --- report --------------------------------------------------------------
bench_size=$(du -sh "$BENCH_DIR" 2>/dev/null | cut -f1)
table() { benchsuite table --results "$results" "$@"; }
mb() { echo "$(($(stat -c %s "$1") / 1000000)) MB"; }
jq_version=$(jq --version 2>/dev/null || echo "not installed")
awk_version=$(awk -W version 2>/dev/null | head -n 1 || true)
[ -n "$awk_version" ] || awk_version=$(awk --version 2>/dev/null | head -n 1 || echo unknown)
gawk_version=$(gawk --version 2>/dev/null | head -n 1 || echo "not installed")
cpu=$(grep -m 1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
targets=(
  "extract ≥ 150 MB/s on one core := extract/extract, 1 core:mbps >= 150"
  "extract ≥ 3× jq (both on one core) := extract/extract, 1 core:mbps / extract/jq, 1 core:mbps >= 3"
  "dedup ≥ 250 MB/s := dedup/dedup:mbps >= 250"
  "dedup ≥ 3× awk := dedup/dedup:mbps / dedup/awk:mbps >= 3"
  "dedup ≥ 3× gawk := dedup/dedup:mbps / dedup/gawk:mbps >= 3"
  "dedup ≥ 20× jq -s unique_by (same $SLURP records) := dedup/dedup, first $SLURP:mbps / dedup/jq -s unique_by, first $SLURP:mbps >= 20"
  "dedup peak RSS ≤ 64 MB (bloom mode) := dedup/dedup:rss_mb <= 64"
  "shard ≥ 200 MB/s := shard/shard:mbps >= 200"
  "stats ≥ 200 MB/s := stats/stats:mbps >= 200"
  "${filter_targets[@]}"
  "merge ≥ 100 MB/s := merge/merge:mbps >= 100"
  "merge of $BIG_LABEL prompts' generation records ≥ 100 MB/s := growth/merge@$BIG_LABEL:mbps >= 100"
  "merge of $BIG_LABEL within its memory budget (--memory 512MiB) := growth/merge@$BIG_LABEL:rss_mb <= 512"
  "extract memory flat: peak RSS at $BIG_LABEL records ≤ 2× at $SMALL_LABEL := growth/extract@$BIG_LABEL:rss_mb / growth/extract@$SMALL_LABEL:rss_mb <= 2"
  "infer ≥ 20,000 req/s against llmsim --instant (simulator included) := client/infer:rps >= 20000"
  "infer peak RSS < 150 MB for $BIG_LABEL prompts := growth/infer@$BIG_LABEL:rss_mb <= 150"
  "llmsim ≥ 20,000 req/s alone := llmsim/llmsim --instant, 1 endpoint:rps >= 20000"
  "fleet: ≥ 97% of the ideal (least-outstanding, steady state) := fleet/least-outstanding:ideal_pct >= 97"
  "fleet: slot utilisation ≥ 99% (least-outstanding, steady state) := fleet/least-outstanding:util_pct >= 99"
)
while IFS= read -r t; do targets+=("$t"); done < <(servers_targets)
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done

tmp_out=$BENCH_OUT.tmp
{
  cat <<EOF
# Benchmarks

Generated by \`pipelines/bench.sh\` ($( [ "$BENCH_QUICK" = 1 ] && echo "BENCH_QUICK=1, small sizes: a smoke test, not figures to quote" || echo "full run")) on $(date -u '+%Y-%m-%d %H:%M UTC'), in $((elapsed / 60)) min $((elapsed % 60)) s.
Every figure below comes from this one run: tokenmill's tools and the tools
users would run instead, on the same files, each command run $BENCH_RUNS times
and the median run reported (the fleet: $FLEET_RUNS runs; the growth table: one run per size). Peak RSS is
the largest single process's, from wait4's rusage, the highest of the runs.

## Machine

| | |
|---|---|
| CPUs (nproc) | $(nproc) |
| CPU model | ${cpu:-unknown} |
| memory | $(free -h 2>/dev/null | awk '/^Mem:/ {print $2}') |
| kernel | $(uname -sr) |
| Go | $(go version | cut -d' ' -f3-) |
| jq | $jq_version |
| awk | $awk_version |
| gawk | $gawk_version |
| node | $(node --version 2>/dev/null || echo "not installed") (openai $openai_version) |
| load before | \`$load_before\` |
| load after | \`$load_after\` |

**Read the load figures first.** On a machine shared with other work (a load
average above the number of CPUs), every figure here is lower than the same
tools reach alone, and the ratios between tools are noisier than usual. The
\`load\` column of each table is the 1-minute load average when that
measurement started.

## Targets

EOF
  benchsuite targets --results "$results" "${target_args[@]}"
  cat <<EOF

## Data

- \`corpus -n $N_MAIN -o data/corpus.jsonl\`: $(num "$n_corpus") records in the
  BAAI/Infinity-Instruct 0625 layout, $(mb data/corpus.jsonl) (long-tailed
  prompts, multi-turn, CJK and emoji, ~0.6% repeated prompts).
- \`extract -o data/prompts.jsonl data/corpus.jsonl\`: $(num "$n_prompts") prompt records, $(mb data/prompts.jsonl).
- \`benchsuite generations --rerun data/rerun.jsonl -o data/gens.jsonl data/prompts.jsonl\`:
  a generation record for each prompt, as infer writes them ($(mb data/gens.jsonl);
  answers of ~100 tokens median, long-tailed to 1,024; 2% error records), and a rerun
  file ($(num "$(lines data/rerun.jsonl)") records, $(mb data/rerun.jsonl)) answering the errors and
  redoing half of the answers cut at the limit: what \`merge\` puts together.
- \`data/*-slurp.jsonl\`: the first $(num "$SLURP") records, for the jq commands that read
  their whole input into memory (\`jq -s\`), which at full size would need several
  GB; tokenmill is measured on the same subset for those ratios.

Commands run in \`$(basename "$BENCH_DIR")/\` with the tools built into \`$(basename "$BENCH_DIR")/bin\`
on PATH. Output goes to a file in \`$(basename "$BENCH_DIR")/tmp\` (counted afterwards:
"records out").

## extract: prompts from the corpus

The \`1 core\` rows are $pin_note, as are jq's.

EOF
  table --group extract
  cat <<EOF

## dedup

\`dedup\` keeps the first record of each prompt (the roles and contents of
\`messages\`), in input order, in a bloom filter; \`--exact\` also keeps a
128-bit hash per prompt. \`awk '!seen[\$0]++'\` is the classic line dedup:
it keeps every distinct *line*, and since every record carries its own id,
it drops nothing here; it is shown for speed and memory. The jq commands
are the key dedups users write: their "records out" should match dedup's.

EOF
  table --group dedup
  cat <<EOF

## shard: 8 parts

EOF
  table --group shard
  cat <<EOF

## merge: one record per prompt from a run and its rerun

EOF
  table --group merge
  cat <<EOF

## stats

EOF
  table --group stats
  echo
  filter_section
  cat <<EOF

## infer: client overhead against a zero-latency llmsim

One \`llmsim --instant\` endpoint on this machine answers every request at
once, so the rate is what the client (and the simulator, on the same two
cores) can push. Every client keeps $CONCURRENCY requests in flight and asks
for 16 tokens. CPU s is the client's own (for xargs, every curl process's),
not the simulator's: on a busy machine, **CPU µs/record** is the steadier
figure.

EOF
  table --group client --cpu-per-record --rate requests/s
  cat <<EOF

## llmsim alone

EOF
  table --group llmsim --rate requests/s
  cat <<EOF

## infer on the calibrated 8-endpoint fleet

\`llmsim\` simulates eight SGLang servers of 48 slots each, calibrated to
the real job (1,180 tok/s per endpoint with a full batch), $TIME_SCALE times
faster than real time. Endpoint 7 is 3× slower; endpoint 6 crashes after
$crash_after requests and comes back 60 s later (simulated), answering
health checks only after a further 20 s start-up. infer's own waits (probe
interval, retry backoff) are scaled by the same factor. $FLEET_PROMPTS prompts, answers
up to 1,024 tokens. Token rates are in simulated time (real rate ÷ $TIME_SCALE).

- **delivered tok/s**: completion tokens infer wrote, per second, in the
  steady state (between 10% and 90% of the run's tokens; from infer's
  \`--metrics-addr\`).
- **fleet ideal**: for each endpoint, 48 slots decoding at its calibrated
  rate (1,180 tok/s, a third of that for the slow one), for the time it
  was up (\`/health\` polled every 100 ms); "with prefill" also charges
  the prompt processing the simulator adds for the answers' actual prompts.
- **slot utilisation**: running requests over the slots of the endpoints
  that were up, from each endpoint's \`/metrics\`.
- **whole run**: all tokens over the whole wall time, ramp-up and tail
  included.
- **endpoint downtime**: seconds (simulated) during which some endpoint was
  down, summed over endpoints.

EOF
  table --group fleet --kind fleet
  echo
  servers_section
  if [ -s regen-results.jsonl ]; then regen_section; else
    echo "## infer --regenerate: conversations on a calibrated fleet"
    echo
    echo "Not measured: jq is not installed."
    echo
  fi
  cat <<EOF

## Cost as the input grows

Each tool at $(echo "$GROWTH" | sed 's/[0-9]*://g; s/ /, /g') records (prompts for extract's
corpus, dedup, shard and infer; generation records for merge and stats;
infer against one \`llmsim --instant\` endpoint). One run per size.
\`awk '!seen[\$0]++'\` is shown for contrast: it holds every line.

EOF
  table --group growth --kind growth
  cat <<EOF

## How to reproduce

    just bench                      # or: bash pipelines/bench.sh
    BENCH_QUICK=1 bash pipelines/bench.sh   # small sizes, ~2 minutes: a smoke test

It needs Go, bash and the usual command-line tools; it installs jq with
apt-get when it is missing and the script runs as root (gawk, when present,
is measured as well), and the OpenAI Node
SDK (\`openai\`, from \`pipelines/bench/package.json\`) into
\`.bench/node\` with npm. Everything it makes stays in \`.bench/\`
($bench_size after this run, its data kept for \`BENCH_REUSE_DATA=1\`;
\`BENCH_DIR\` moves it). This run took
$((elapsed / 60)) min $((elapsed % 60)) s. Figures of a single tool:
\`go test -run '^\$' -bench . -benchtime 1x ./lib/<tool>/\`.
EOF
} >"$tmp_out"
mv "$tmp_out" "$BENCH_OUT"
say "wrote $BENCH_OUT in $((elapsed / 60)) min $((elapsed % 60)) s"

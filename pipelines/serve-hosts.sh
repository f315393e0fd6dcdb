#!/usr/bin/env bash
# serve-hosts.sh: one serve per host, started, looked at and stopped over
# ssh with GNU parallel (as sharded.sh runs its jobs). Each host runs
# serve-node.sh in the background: its servers, its state in WORK/serve/HOST,
# its messages in WORK/serve/HOST.log, the URLs of its servers ready now in
# WORK/endpoints/HOST.txt. infer reads them all as one and follows them:
# infer --endpoints-file WORK/endpoints, or ENDPOINTS_FILE=WORK/endpoints
# for sharded.sh and generate.sh.
#
#   serve-hosts.sh start COMMAND ARGS...   start serve on every host; returns once every
#                                          host's servers are all ready (or one serve failed)
#   serve-hosts.sh status                  serve status on every host
#   serve-hosts.sh stop                    serve stop on every host: no server left running
#
# Usage:
#   export HOSTS=gpu1,gpu2 WORK=/nfs/run1 BIN=/nfs/tokenmill/bin
#   SERVE_ARGS='--gpus 0-7' pipelines/serve-hosts.sh start python -m sglang.launch_server \
#     --model-path Qwen/Qwen3-8B --host 0.0.0.0 --port {port}
#   ENDPOINTS_FILE=$WORK/endpoints SHARDS=8 pipelines/sharded.sh prompts.jsonl
#   pipelines/serve-hosts.sh stop
#
# WORK must be on a filesystem every host mounts at the same path (the
# endpoints files are read where infer runs), and every host needs the
# binaries (BIN) and passwordless ssh from here. A host with other GPUs
# takes its own flags from WORK/serve/HOST.args (one line, e.g. --gpus 0-3).
#
# Variables (defaults in brackets):
#   HOSTS         the hosts, as parallel --sshlogin takes them, comma-separated;
#                 the name after any user@ is the one written in its endpoints
#                 file [required, or PARALLEL_ARGS naming them]
#   WORK          the shared directory [required]
#   SERVE_ARGS    serve's flags on every host, split on white space []
#   SERVE_HOST    the host name written in the endpoints files instead of each
#                 host's own (a test's 127.0.0.1) [each host's name]
#   WAIT          seconds start waits for every host's servers [3600]
#   PARALLEL_ARGS extra flags for parallel (--ssh, --sshloginfile) []
#   BIN           directory holding the binaries, the same on every host [PATH]
set -euo pipefail

[ -n "${BIN:-}" ] && BIN=$(cd "$BIN" && pwd) && PATH="$BIN:$PATH"
HOSTS=${HOSTS:-}
WORK=${WORK:?WORK must name a directory every host sees}
WAIT=${WAIT:-3600}
read -ra parallel_args <<<"${PARALLEL_ARGS:-}"
[ -n "$HOSTS" ] && parallel_args+=(--sshlogin "$HOSTS")
action=${1:-}
[ $# -gt 0 ] && shift
command -v parallel >/dev/null || { echo "serve-hosts.sh: GNU parallel not found (Debian/Ubuntu: apt-get install parallel)" >&2; exit 1; }
mkdir -p "$WORK/serve" "$WORK/endpoints"
WORK=$(cd "$WORK" && pwd)
here=$(cd "$(dirname "$0")" && pwd)

# on_hosts runs a script of WORK on every host, tagged with its name. The
# script finds the host's name in PARALLEL_SSHHOST, which parallel sets.
on_hosts() {
  parallel --nonall --tag --line-buffer "${parallel_args[@]}" bash "$1"
}

# node names the host in the scripts run there: the sshlogin's host part,
# or this machine's name for a local slot (:).
node='NODE=${PARALLEL_SSHHOST:-}; case $NODE in ""|:) NODE=$(hostname) ;; esac; export NODE'

# preamble is what every script run on the hosts starts with: the host's
# name and the settings, which do not cross ssh otherwise.
preamble() {
  echo "$node"
  printf 'export WORK=%q SERVE_ARGS=%q PATH=%q"$PATH"\n' "$WORK" "${SERVE_ARGS:-}" "${BIN:+$BIN:}"
  if [ -n "${SERVE_HOST:-}" ]; then printf 'export SERVE_HOST=%q\n' "$SERVE_HOST"; fi
}

case $action in
start)
  [ $# -gt 0 ] || { echo "usage: $0 start COMMAND ARGS..." >&2; exit 2; }
  # The command goes in a script on WORK rather than through parallel's and
  # ssh's quoting: {port} and the like arrive as written.
  {
    preamble
    printf 'rm -f "$WORK/serve/$NODE.log"; echo "$NODE" >>"$WORK/serve/nodes"\n'
    printf 'nohup bash %q' "$here/serve-node.sh"
    printf ' %q' "$@"
    printf ' >"$WORK/serve/$NODE.log" 2>&1 </dev/null &\n'
    printf 'echo "serve started (pid $!): messages in $WORK/serve/$NODE.log, endpoints in $WORK/endpoints/$NODE.txt"\n'
  } >"$WORK/serve/start.sh"
  : >"$WORK/serve/nodes"
  on_hosts "$WORK/serve/start.sh"
  # Wait for every host's serve to say its servers are all ready.
  mapfile -t nodes <"$WORK/serve/nodes"
  deadline=$((SECONDS + WAIT))
  while :; do
    ready=0
    for h in "${nodes[@]}"; do
      log=$WORK/serve/$h.log
      if grep -qE "^(serve: error:|serve-node.sh: )" "$log" 2>/dev/null; then
        echo "serve-hosts.sh: serve failed on $h:" >&2
        tail -5 "$log" >&2
        exit 1
      fi
      if grep -q "servers ready after" "$log" 2>/dev/null; then ready=$((ready + 1)); fi
    done
    [ "$ready" = ${#nodes[@]} ] && break
    if ((SECONDS >= deadline)); then
      echo "serve-hosts.sh: $ready of ${#nodes[@]} hosts ready after ${WAIT}s; see $WORK/serve/*.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "serve-hosts.sh: every server of ${#nodes[@]} hosts ready: infer --endpoints-file $WORK/endpoints (or ENDPOINTS_FILE=$WORK/endpoints)" >&2
  ;;
status | stop)
  { preamble; printf 'serve %s --state-dir "$WORK/serve/$NODE"\n' "$action"; } >"$WORK/serve/$action.sh"
  on_hosts "$WORK/serve/$action.sh"
  ;;
*)
  echo "usage: $0 start COMMAND ARGS... | status | stop" >&2
  exit 2
  ;;
esac

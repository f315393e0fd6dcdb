#!/usr/bin/env bash
# serve-node.sh: this node's serve, as slurm-serve.sbatch (one per node of
# the allocation) and serve-hosts.sh (one per host, over ssh) run it. Its
# state, logs and messages go to WORK/serve/NODE*, and the URLs of its
# servers ready now to WORK/endpoints/NODE.txt, which infer reads with
# every other node's: infer --endpoints-file WORK/endpoints (a directory:
# every *.txt in it), following them as servers come and go.
#
#   serve --host NODE --state-dir WORK/serve/NODE --endpoints-file WORK/endpoints/NODE.txt SERVE_ARGS -- COMMAND...
#
# Usage:
#   WORK=/nfs/run1 SERVE_ARGS='--gpus 0-7' pipelines/serve-node.sh python -m sglang.launch_server \
#     --model-path Qwen/Qwen3-8B --host 0.0.0.0 --port {port}
#
# Variables (defaults in brackets):
#   WORK        a directory every node and the machine running infer see [required]
#   NODE        this node's name, as the others reach it [hostname]
#   SERVE_HOST  the host written in the endpoints file (serve --host) [NODE]
#   SERVE_ARGS  serve's flags, split on white space (--gpus 0-7 --port 30000 ...);
#               a file WORK/serve/NODE.args adds this node's own (one line) []
#   BIN         directory holding the tokenmill binaries [PATH]
set -euo pipefail

[ -n "${BIN:-}" ] && PATH="$(cd "$BIN" && pwd):$PATH"
WORK=${WORK:?WORK must name a directory every node sees}
NODE=${NODE:-$(hostname)}
SERVE_HOST=${SERVE_HOST:-$NODE}
read -ra serve_args <<<"${SERVE_ARGS:-}"
if [ -f "$WORK/serve/$NODE.args" ]; then
  read -ra own <"$WORK/serve/$NODE.args" || true
  serve_args+=("${own[@]}")
fi
if [ $# = 0 ]; then
  echo "usage: WORK=DIR [SERVE_ARGS=...] $0 COMMAND ARGS..." >&2
  exit 2
fi
command -v serve >/dev/null || { echo "serve-node.sh: serve not found: build the tools (go build -o bin/ ./cmd/...) and set BIN=bin" >&2; exit 1; }
mkdir -p "$WORK/serve" "$WORK/endpoints"
exec serve --host "$SERVE_HOST" --state-dir "$WORK/serve/$NODE" --endpoints-file "$WORK/endpoints/$NODE.txt" \
  "${serve_args[@]}" -- "$@"

#!/usr/bin/env bash
# Stands in for srun in the slurm-serve.sbatch test: FAKE_NODES tasks on this
# machine, named node0, node1, ... in NODE, as srun runs one task per node of
# the allocation. A SIGTERM (scancel) is passed on to every task, and srun
# ends once they all have.
set -uo pipefail
while [ $# -gt 0 ]; do
  case $1 in
    --*) shift ;;
    *) break ;;
  esac
done
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
for ((i = 0; i < ${FAKE_NODES:-1}; i++)); do
  NODE=node$i "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  while :; do
    wait "$p"
    s=$?
    kill -0 "$p" 2>/dev/null || break # a trap ended the wait, not the task
  done
  [ "$s" = 0 ] || status=$s
done
exit "$status"

#!/usr/bin/env bash
# Starts or stops a private single-node Slurm cluster (munged, slurmctld,
# slurmd) for the pipeline tests. Everything lives under DIR: its own munge
# key and socket, its own slurm.conf and ports, so it touches no system
# cluster. Needs root and Debian's slurm-wlm and munge.
#
#   testdata/slurm/cluster.sh start DIR   # prints: export SLURM_CONF=DIR/slurm.conf
#   testdata/slurm/cluster.sh stop DIR
#
# SLURM_TEST_PORT (default 16817) is slurmctld's port; slurmd takes the next.
# A start that fails stops whatever it had started.
set -eEuo pipefail

cmd=${1:?usage: cluster.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: cluster.sh start|stop DIR}")
host=$(hostname -s)
ctld_port=${SLURM_TEST_PORT:-16817}

stop() {
  # The daemons delete their pid files as they exit: read the pids first.
  pids=()
  for p in slurmd slurmctld munged; do
    [ -f "$dir/$p.pid" ] && pids+=("$(cat "$dir/$p.pid")")
  done
  [ ${#pids[@]} = 0 ] && return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

start() {
  trap 'echo "cluster.sh: start failed; stopping what it started (logs in $dir)" >&2; stop' ERR
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
  : > "$dir/plugstack.conf"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=tokenmill-test
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
MpiDefault=none
NodeName=$host CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 100); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "export SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.2
  done
  echo "cluster.sh: the node did not become idle within 20 s; logs in $dir" >&2
  sinfo >&2 || true
  tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
  trap - ERR
  stop
  return 1
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) echo "usage: cluster.sh start|stop DIR" >&2; exit 2 ;;
esac

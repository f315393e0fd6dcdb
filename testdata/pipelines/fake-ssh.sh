#!/usr/bin/env bash
# Stands in for ssh in the sharded.sh tests (parallel --ssh): the "host" is a
# directory under FAKE_HOSTS that serves as its home, and the command runs
# there, as sshd would run it in the login shell. Everything GNU parallel
# sends over ssh (its perl job wrapper, rsync --server for --transferfile and
# --return, the --cleanup commands) runs unchanged.
set -euo pipefail
: "${FAKE_HOSTS:?FAKE_HOSTS must name the directory of fake hosts}"
while [ $# -gt 0 ]; do
  case $1 in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;; # options with a value
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=${1:?no host}
shift
[ "${1:-}" = -- ] && shift
home=$FAKE_HOSTS/${host#*@}
mkdir -p "$home"
echo "$host $*" >>"$FAKE_HOSTS/ssh.log"
cd "$home"
# sshd gives the command a fresh environment, not the client's.
exec env -i HOME="$home" PATH="$PATH" SHELL=/bin/bash USER="${USER:-$(id -un)}" LOGNAME="${USER:-$(id -un)}" bash -c "$*"

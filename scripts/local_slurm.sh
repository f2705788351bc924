#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests marked `slurm` and for trying a sweep
# (docs/sweeps.md, "A local Slurm cluster"). Installs nothing: needs Debian's slurm-wlm and munge
# (`apt-get install slurm-wlm munge`). Everything lives in one folder; nothing under /etc is used.
#
#   scripts/local_slurm.sh start    # munged + slurmctld + slurmd (CPUs=2); prints the SLURM_CONF line
#   scripts/local_slurm.sh status   # the daemons' pids and `sinfo`
#   scripts/local_slurm.sh stop     # stops the daemons it started (by pid) and removes the folder
#
# The folder: $LOCAL_SLURM_DIR, default ${TMPDIR:-/tmp}/reasoning-rl-slurm-$UID. Daemons run as the
# calling user (root in CI): ProctrackType=proctrack/linuxproc and TaskPlugin=task/none need no
# cgroups; the munge key is generated; the ports are free ones chosen at start.
set -euo pipefail

DIR="${LOCAL_SLURM_DIR:-${TMPDIR:-/tmp}/reasoning-rl-slurm-$(id -u)}"
CPUS="${LOCAL_SLURM_CPUS:-2}"
DAEMONS=(slurmd slurmctld munged)   # stopped in this order

die() { echo "local_slurm.sh: $*" >&2; exit 2; }

pid_of() {  # the pid recorded for daemon $1, when that process is still alive
  local f="$DIR/run/$1.pid"
  [[ -s "$f" ]] || return 1
  local pid; pid="$(cat "$f")"
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_for() {  # wait_for <seconds> <command...>: true once the command succeeds
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < end )) || return 1
    sleep 0.2
  done
}

start() {
  for tool in munged mungekey slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null 2>&1 || [[ -x "/usr/sbin/$tool" ]] \
      || die "$tool not found: install Slurm and munge first (apt-get install slurm-wlm munge)"
  done
  export PATH="$PATH:/usr/sbin"
  if [[ -f "$DIR/slurm.conf" ]]; then
    if pid_of slurmctld >/dev/null; then
      echo "already running in $DIR"; echo "export SLURM_CONF=$DIR/slurm.conf"; return 0
    fi
    die "$DIR holds a stopped cluster: run '$0 stop' first"
  fi
  mkdir -p "$DIR"/{run,log,state,spool,munge}
  chmod 700 "$DIR/munge"
  mungekey --create --keyfile="$DIR/munge/munge.key" --force >/dev/null 2>&1 \
    || dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munge.seed"
  wait_for 10 test -S "$DIR/munge/munge.socket" || die "munged did not start; see $DIR/log/munged.log"

  local host user ctld_port d_port
  host="$(hostname -s)"; user="$(id -un)"; ctld_port="$(free_port)"; d_port="$(free_port)"
  cat > "$DIR/slurm.conf" <<CONF
# Written by scripts/local_slurm.sh: a one-node cluster for tests.
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=10
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$DIR/slurm.conf"
  slurmctld -i || die "slurmctld did not start; see $DIR/log/slurmctld.log"
  wait_for 20 scontrol ping || die "slurmctld does not answer; see $DIR/log/slurmctld.log"
  slurmd -N "$host" || die "slurmd did not start; see $DIR/log/slurmd.log"
  wait_for 30 bash -c "sinfo -h -o %T | grep -q -E '^(idle|mixed|allocated)'" \
    || die "the node did not come up; see $DIR/log/slurmd.log and $DIR/log/slurmctld.log"
  echo "local Slurm cluster running in $DIR (partition debug, $CPUS CPUs); point Slurm's commands at it with:"
  echo "export SLURM_CONF=$DIR/slurm.conf"
}

status() {
  [[ -f "$DIR/slurm.conf" ]] || { echo "no local Slurm cluster in $DIR"; return 3; }
  local d running=0
  for d in "${DAEMONS[@]}"; do
    if pid="$(pid_of "$d")"; then echo "$d: running (pid $pid)"; running=$((running + 1)); else echo "$d: stopped"; fi
  done
  echo "export SLURM_CONF=$DIR/slurm.conf"
  (( running == ${#DAEMONS[@]} )) && SLURM_CONF="$DIR/slurm.conf" sinfo || true
  (( running == ${#DAEMONS[@]} ))
}

stop() {
  [[ -d "$DIR" ]] || { echo "no local Slurm cluster in $DIR"; return 0; }
  local d pid
  if pid_of slurmctld >/dev/null; then  # jobs first, so that no job outlives its cluster
    SLURM_CONF="$DIR/slurm.conf" scancel --full --user="$(id -un)" 2>/dev/null || true
    wait_for 20 bash -c "[[ -z \"\$(SLURM_CONF='$DIR/slurm.conf' squeue -h 2>/dev/null)\" ]]" \
      || echo "jobs still listed after 20 s; stopping the daemons anyway" >&2
  fi
  for d in "${DAEMONS[@]}"; do
    pid="$(pid_of "$d")" || continue
    kill "$pid"
    wait_for 15 bash -c "! kill -0 $pid" || { echo "$d (pid $pid) ignored SIGTERM; killing it" >&2; kill -9 "$pid" || true; }
  done
  rm -rf "$DIR"
  echo "local Slurm cluster in $DIR stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status  (folder: \$LOCAL_SLURM_DIR, default ${DIR})" >&2; exit 2 ;;
esac

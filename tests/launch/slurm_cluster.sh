#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the job-script test: munged with its own key and
# socket, slurmctld and slurmd on private ports, everything under a temporary folder that is removed at
# the end. Then: the one-node job script trains on the sample data (srun --mpi=pmix), and the resumable
# script continues that run's checkpoint, then is pre-empted (SIGTERM to its ranks), checkpoints, submits
# its continuation, which finishes the run. Needs root and Debian's slurmctld, slurmd, slurm-client and
# munge, and a built tree. Exit 77 (skipped) when not root or Slurm is missing.
#   bash tests/launch/slurm_cluster.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  echo "slurm_cluster: needs root, slurmctld, slurmd and munged: skipped"
  exit 77
fi
dir=$(mktemp -d /tmp/ddl-slurm.XXXXXX)
host=$(hostname -s)
cleanup() {
  scancel --quiet --full 2>/dev/null || true
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir"/{munge,state,spool,tmp,work}
tar xzf "$root/data/cifar10_sample.tar.gz" -C "$dir"
"$root/build/launch/ddl_data" import --from "$dir/cifar10_sample" --output "$dir/train.h5" --val-fraction 0.2 \
  --seed 1 > /dev/null
train=$dir/train.h5 val=$dir/train_val.h5
chmod 755 "$dir/munge"
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --key-file "$dir/munge.key" --socket "$dir/munge/munge.socket.2" --pid-file "$dir/munged.pid" \
  --log-file "$dir/munged.log" --seed-file "$dir/munge.seed"

port=$((20000 + RANDOM % 20000))
export SLURM_CONF="$dir/slurm.conf"
cat > "$SLURM_CONF" <<CONF
ClusterName=ddltest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
TmpFS=$dir/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -c -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %T | grep -q idle || { echo "slurm_cluster: the node did not come up"; cat "$dir"/slurm*.log; exit 1; }

# Runs a job script to its end; prints its output and returns its exit code.
run_job() {
  local id
  id=$(sbatch --parsable --wait --chdir="$root" --output="$dir/work/%j.out" --overcommit "$@") || true
  id=${id%%;*}
  cat "$dir/work/$id.out"
  scontrol show job "$id" | sed -n 's/.*ExitCode=\([0-9]*\):.*/\1/p' | head -1 | { read -r code; return "${code:-1}"; }
}
wait_for() {  # until the command succeeds, at most 120 s
  for _ in $(seq 600); do "$@" && return 0; sleep 0.2; done
  return 1
}
job_state() { scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
finished() { case "$(job_state "$1")" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) return 0 ;; esac; return 1; }

export DDL_ROOT="$root"
ckpt="$dir/work/ckpt"
export DDL_ARGS="--train $train --val $val --epochs 1 --steps-per-epoch 20 --seed 3 --checkpoint-dir $ckpt"
echo "== one_node.sbatch"
run_job "$root/launch/slurm/one_node.sbatch" | tee "$dir/work/one.txt"
grep -q "final validation accuracy" "$dir/work/one.txt"
[ -f "$ckpt/last.h5" ] || { echo "slurm_cluster: no checkpoint written"; exit 1; }
echo "== resumable.sbatch continues it to 2 epochs"
export DDL_ARGS="--train $train --val $val --epochs 2 --steps-per-epoch 20 --seed 3 --checkpoint-dir $ckpt"
run_job "$root/launch/slurm/resumable.sbatch" | tee "$dir/work/two.txt"
grep -q "resumed from $ckpt/last.h5 after epoch 1" "$dir/work/two.txt"
grep -q "epoch 2/2" "$dir/work/two.txt"

echo "== pre-emption: SIGTERM to the ranks of a resumable job; it checkpoints and submits its continuation"
export DDL_ARGS="--train $train --epochs 3 --steps-per-epoch 60 --seed 3 --checkpoint-dir $dir/work/pre"
first=$(sbatch --parsable --chdir="$root" --output="$dir/work/%j.out" --overcommit "$root/launch/slurm/resumable.sbatch")
first=${first%%;*}
wait_for grep -qs "epoch 1/3" "$dir/work/$first.out"
scancel --signal=TERM "$first"
wait_for finished "$first"
cat "$dir/work/$first.out"
grep -q "stopped by a signal" "$dir/work/$first.out"
next=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' "$dir/work/$first.out")
[ -n "$next" ] || { echo "slurm_cluster: no continuation was submitted"; exit 1; }
wait_for finished "$next"
[ -f "$dir/work/$next.out" ] || { echo "slurm_cluster: job $next wrote no output"; scontrol show job "$next"; exit 1; }
cat "$dir/work/$next.out"
grep -q "resumed from" "$dir/work/$next.out"
grep -q "epoch 3/3" "$dir/work/$next.out"
[ "$(job_state "$next")" = COMPLETED ]
echo "slurm_cluster: done"

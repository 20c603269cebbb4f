#!/usr/bin/env bash
# launch/slurm/several_nodes.sbatch on a three-node Slurm cluster, as an administrator would first try it:
# three "hosts" made of network namespaces (tests/launch/netns_hosts.sh: 10.79.0.1-3, hostnames
# host1-host3), one slurmd on each under its own node name, slurmctld on host1 (tests/launch/slurm_daemons.sh),
# and the job across all three: 2 ranks a node, srun --mpi=pmix, Open MPI over TCP between the hosts. It
# must train to its final accuracy with every rank on its node and leave the checkpoint. Then
# launch/slurm/elastic.sbatch, which loses node 3 and goes on with nodes 1 and 2. Needs root, ip
# and Debian's Slurm and munge, and a built tree (DDL_TRAIN, DDL_DATA: the programs, default
# build/launch/). Exit 77 (skipped) when not root or those are missing.
#   bash tests/launch/slurm_nodes.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null ||
   ! command -v ip > /dev/null; then
  echo "slurm_nodes: needs root, ip, slurmctld, slurmd and munged: skipped"
  exit 77
fi
source "$root/tests/launch/netns_hosts.sh"
source "$root/tests/launch/slurm_daemons.sh"
dir=$(mktemp -d /tmp/ddl-slurm-nodes.XXXXXX)
# Node hostN is namespace ddl_sN; what starts there gets that hostname, as on a machine of its own.
on_node() {
  local n=${1#host}
  shift
  nsenter --net=/run/netns/ddl_s"$n" unshare --uts sh -c 'hostname "$0"; exec "$@"' "host$n" "$@"
}
cleanup() {
  slurm_down "$dir"
  netns_hosts_down ddl_s 3
  rm -rf "$dir"
}
trap cleanup EXIT
netns_hosts_up ddl_s 10.79.0 3 2 "$dir"
mkdir -p "$dir/work"
tar xzf "$root/data/cifar10_sample.tar.gz" -C "$dir"
"${DDL_DATA:-$root/build/launch/ddl_data}" import --from "$dir/cifar10_sample" --output "$dir/train.h5" \
  --val-fraction 0.2 --seed 1 > /dev/null
slurm_up "$dir" host1=10.79.0.1 host2=10.79.0.2 host3=10.79.0.3

# Open MPI between the hosts over their one network (sbatch passes the environment on).
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=10.79.0.0/24
export DDL_ROOT="$root"
export DDL_ARGS="--train $dir/train.h5 --val $dir/train_val.h5 --epochs 1 --steps-per-epoch 15 --batch-size 16 \
--seed 3 --checkpoint-dir $dir/work/ckpt"
echo "== several_nodes.sbatch on 3 nodes"
id=$(on_node host1 sbatch --parsable --wait --nodes=3 --chdir="$root" --output="$dir/work/%j.out" \
  "$root/launch/slurm/several_nodes.sbatch") || true
id=${id%%;*}
[ -f "$dir/work/$id.out" ] || { echo "slurm_nodes: job '$id' wrote no output"; tail -n 20 "$dir"/slurm*.log; exit 1; }
cat "$dir/work/$id.out"
grep -q "^ddl on 3 node(s) (host\[1-3\]), 6 ranks" "$dir/work/$id.out"
grep -q "^ranks 6," "$dir/work/$id.out"
grep -q "^3 nodes: host1 x2, host2 x2, host3 x2" "$dir/work/$id.out"
grep -q "final validation accuracy" "$dir/work/$id.out"
[ -f "$dir/work/ckpt/last.h5" ] || { echo "slurm_nodes: no checkpoint written"; exit 1; }
on_node host1 scontrol show job "$id" | grep -q "JobState=COMPLETED"

# elastic.sbatch: node 3 dies during epoch 3 (everything running there killed, slurmd too); the job goes on
# on nodes 1 and 2 from the last checkpoint without anyone, finishes, and ends where a job of 6 ranks to
# that checkpoint and then of 4 ranks ends (the same global batch; the ring sums in the same order).
echo "== elastic.sbatch on 3 nodes, node 3 lost"
common="--train $dir/train.h5 --val $dir/train_val.h5 --steps-per-epoch 10 --global-batch 24 --seed 3 \
--optimizer sgd --allreduce ring --checkpoint-every epoch"
export DDL_ARGS="$common --epochs 5 --timeout 5 --checkpoint-dir $dir/work/elastic" DDL_MIN_NODES=2 DDL_PROBE_SECONDS=10 \
  DDL_END_GRACE=5
id=$(on_node host1 sbatch --parsable --nodes=3 --chdir="$root" --output="$dir/work/%j.out" \
  "$root/launch/slurm/elastic.sbatch")
id=${id%%;*}
for _ in $(seq 600); do grep -q "^epoch 2/" "$dir/work/$id.out" 2> /dev/null && break; sleep 0.2; done
grep -q "^epoch 2/" "$dir/work/$id.out" || { echo "slurm_nodes: the elastic job did not reach epoch 2"; cat "$dir/work/$id.out"; exit 1; }
kill -KILL $(ip netns pids ddl_s3) 2> /dev/null || true
for _ in $(seq 900); do
  case "$(on_node host1 scontrol show job "$id" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;;
  esac
  sleep 0.2
done
cat "$dir/work/$id.out"
grep -q "^elastic.sbatch: restart 1/3 after exit code [0-9]*: lost host3 (ranks 4-5); continuing on 2 node(s) from $dir/work/elastic/last.h5" \
  "$dir/work/$id.out"
grep -q "^ddl on 2 node(s) (host1,host2), 4 ranks" "$dir/work/$id.out"
grep -q "^ranks 4, threads per rank 1, batch 6 per rank (global 24)" "$dir/work/$id.out"
grep -q "^epoch 5/5" "$dir/work/$id.out"
on_node host1 scontrol show job "$id" | grep -q "JobState=COMPLETED"
at=$(sed -n "s|^resumed from $dir/work/elastic/last.h5 after epoch \([0-9]*\)\(;.*\)\?\$|\1|p" "$dir/work/$id.out")
[ -n "$at" ] || { echo "slurm_nodes: the restart did not resume from an epoch's checkpoint"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include  # the reference runs on this machine's own network
train="${DDL_TRAIN:-$root/build/launch/ddl_train}"
read -r -a args <<< "$common --threads 1 --progress never --checkpoint-dir $dir/work/reference"
mpirun --oversubscribe -np 6 "$train" "${args[@]}" --epochs "$at" > /dev/null
mpirun --oversubscribe -np 4 "$train" "${args[@]}" --epochs 5 --resume auto > /dev/null
/usr/bin/python3 - "$dir/work/elastic/last.h5" "$dir/work/reference/last.h5" <<'PY'
import sys, h5py, numpy
a, b = (numpy.asarray(h5py.File(path, "r")["params"]) for path in sys.argv[1:])
if not numpy.array_equal(a, b):
    sys.exit(f"slurm_nodes: the elastic job's parameters differ from 6 then 4 ranks' by up to {abs(a - b).max()}")
PY
echo "slurm_nodes: done"

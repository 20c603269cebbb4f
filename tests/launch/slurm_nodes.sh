#!/usr/bin/env bash
# launch/slurm/several_nodes.sbatch on a three-node Slurm cluster, as an administrator would first try it:
# three "hosts" made of network namespaces (tests/launch/netns_hosts.sh: 10.79.0.1-3, hostnames
# host1-host3), one slurmd on each under its own node name, slurmctld on host1 (tests/launch/slurm_daemons.sh),
# and the job across all three: 2 ranks a node, srun --mpi=pmix, Open MPI over TCP between the hosts. It
# must train to its final accuracy with every rank on its node and leave the checkpoint. Needs root, ip
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
echo "slurm_nodes: done"

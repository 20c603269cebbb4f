# Sourced, not run: a real Slurm cluster for the tests (root only), all of its state in one folder: munged
# with its own key and socket, slurmctld and one slurmd per node on private ports.
#   slurm_up DIR NODE=ADDRESS...   starts it and waits until every node is idle; the first node also runs
#                                  slurmctld. The caller defines on_node NAME CMD... (run CMD on that node:
#                                  here for a one-node cluster, in the node's namespace for several).
#                                  Exports SLURM_CONF; Slurm's commands then run with on_node FIRST ...
#   slurm_down DIR                 cancels every job and stops the daemons
# A node that stops answering is declared down after 20 s (SlurmdTimeout; 300 by default), so that a job
# that lost one (tests/launch/slurm_nodes.sh) ends within the test. munged runs here: its socket is a file, which every node (namespace) sees. A node that is a network
# namespace must keep the host's /sys (enter it with nsenter, not `ip netns exec`, which remounts /sys and
# hides the cgroup file system slurmd needs).

slurm_up() {
  local dir=$1 first=${2%%=*} node port cpus names=()
  shift
  slurm_first=$first
  mkdir -p "$dir"/{munge,state}
  chmod 755 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge.key"
  munged --force --key-file "$dir/munge.key" --socket "$dir/munge/munge.socket.2" --pid-file "$dir/munged.pid" \
    --log-file "$dir/munged.log" --seed-file "$dir/munge.seed"
  port=$((20000 + RANDOM % 20000))
  export SLURM_CONF="$dir/slurm.conf"
  cat > "$SLURM_CONF" <<CONF
ClusterName=ddltest
SlurmctldHost=$first(${1#*=})
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
TmpFS=$dir/tmp-%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=20
SlurmdParameters=config_overrides
CONF
  # At least 2 CPUs a node, the job scripts' 2 tasks, on any machine (config_overrides lets a node claim
  # more than it has); the tests do not use --overcommit, which Slurm 24.11 (Debian 13) left pending for
  # ever with --ntasks-per-node=2 on a 2-CPU node ("Resources").
  cpus=$(($(nproc) > 2 ? $(nproc) : 2))
  for node in "$@"; do
    echo "NodeName=${node%%=*} NodeAddr=${node#*=} CPUs=$cpus State=UNKNOWN" >> "$SLURM_CONF"
    names+=("${node%%=*}")
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP" >> "$SLURM_CONF"
  on_node "$first" slurmctld -c -f "$SLURM_CONF"
  for node in "${names[@]}"; do
    mkdir -p "$dir/spool-$node" "$dir/tmp-$node"
    on_node "$node" slurmd -f "$SLURM_CONF"
  done
  for _ in $(seq 150); do
    [ "$(on_node "$first" sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -eq ${#names[@]} ] && return 0
    sleep 0.2
  done
  echo "slurm: the nodes did not come up"
  on_node "$first" sinfo -N 2>&1 || true
  tail -n 20 "$dir"/slurm*.log
  return 1
}

slurm_down() {
  local dir=$1 pidfile pids=()
  if [ -n "${slurm_first:-}" ]; then
    on_node "$slurm_first" scancel --quiet --full 2> /dev/null || true
    for _ in $(seq 50); do  # the jobs' steps and ranks end before their slurmd
      [ -z "$(on_node "$slurm_first" squeue -h 2> /dev/null)" ] && break
      sleep 0.2
    done
  fi
  for pidfile in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
    [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  kill "${pids[@]}" 2> /dev/null || true
  local pid alive
  for _ in $(seq 50); do
    alive=""
    for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && alive=1; done
    [ -n "$alive" ] || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2> /dev/null || true
}

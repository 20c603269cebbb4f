#!/usr/bin/env bash
# Runs ddl_train across the containers of docker-compose.yml, one rank per host of DDL_HOSTS, as user ddl
# on the launcher; the first run imports the repository's sample dataset into the shared /data volume.
# Extra arguments go to ddl_train (they may replace the data options).
set -euo pipefail
cd /ddl
if [ ! -f /data/train.h5 ]; then
  tar xzf data/cifar10_sample.tar.gz -C /data
  /ddl-bin/ddl_data import --from /data/cifar10_sample --output /data/train.h5 --val-fraction 0.2 --seed 1
fi
hosts=${DDL_HOSTS:-launcher,worker1,worker2}
ranks=$(tr ',' '\n' <<< "$hosts" | wc -l)
exec mpirun -np "$ranks" --host "$hosts" --mca btl self,vader,tcp --mca plm_rsh_agent ssh \
  /ddl-bin/ddl_train --train /data/train.h5 --val /data/train_val.h5 --checkpoint-dir /data/checkpoints \
  --progress never "$@"

#!/usr/bin/env bash
# How long a job of launch/elastic_run.sh takes from a host's loss to training again on the hosts left
# (detection, ending mpirun, probing the hosts, start-up, resuming), and how much work it loses: three hosts
# made of network namespaces (tests/launch/three_hosts.sh, root only), one rank each, host 3's link cut for
# good once epoch PATTERN_EPOCH has ended. elastic_run's defaults (probes and grace of 30 s) and ddl_train's
# --timeout auto, unless the options say otherwise.
#   bash bench/elastic_restart.sh OUT_DIR PATTERN_EPOCH DDL_TRAIN_OPTIONS...
# e.g. bash bench/elastic_restart.sh /tmp/er 1 --model seed_cnn --train train.h5 --global-batch 48 --epochs 3 \
#        --checkpoint-every 20steps --checkpoint-dir /tmp/er/ck
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1 epoch=$2
shift 2
DDL_ELASTIC_OPTIONS=${DDL_ELASTIC_OPTIONS:-"--probe-seconds 30 --end-grace 30"} DDL_JOB_SECONDS=${DDL_JOB_SECONDS:-900} \
  bash tests/launch/three_hosts.sh elastic "$out" "epoch $epoch/" --progress never "$@" | tee "$out.times"
cut=$(sed -n 's/^cut after \(.*\) s$/\1/p' "$out.times")
resumed=$(sed -n 's/^resumed after \(.*\) s$/\1/p' "$out.times")
grep "elastic_run: restart" "$out/err.txt" || true
grep "^resumed from" "$out/out.txt" || true
[ -n "$cut" ] && [ -n "$resumed" ] &&
  awk -v a="$cut" -v b="$resumed" 'BEGIN {printf "elastic_restart: training again %.1f s after the host was lost\n", b - a}'

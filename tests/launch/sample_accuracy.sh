#!/usr/bin/env bash
# Checks the output of the README's first command (launch/run_sample.sh): it must end with a final
# validation accuracy that shows learning. Ten classes: chance is 0.1; five epochs on the sample reach
# about 0.5.
#   bash tests/launch/sample_accuracy.sh OUTPUT_FILE [WHERE]   (WHERE names the machine in the message)
set -euo pipefail
output=$1 where=${2:-this machine}
accuracy=$(sed -n 's/^final validation accuracy \([0-9.]*\).*/\1/p' "$output")
[ -n "$accuracy" ] || { echo "sample_accuracy: $where: no final validation accuracy line"; exit 1; }
awk -v a="$accuracy" 'BEGIN {exit !(a >= 0.35)}' ||
  { echo "sample_accuracy: $where: final validation accuracy $accuracy is below 0.35"; exit 1; }
echo "sample_accuracy: $where: final validation accuracy $accuracy"

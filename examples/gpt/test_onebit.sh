#!/usr/bin/env bash
# 1-bit Adam on the demo at 2 and 4 ranks under mpirun: 400 steps, the last 300 in the compression
# stage (freeze_step 100), against the same run with AdamW (ds_config.json). The held-out losses
# must agree within 2%, and the run must report that compression started.
#   $1: dsrt_gpt_demo   $2: ds_config.json   $3: ds_config_onebit_adam.json   $4: a scratch folder
#   $5...: mpirun and its flags
set -euo pipefail
demo=$1 adam=$2 onebit=$3 dir=$4
shift 4
rm -rf "$dir" && mkdir -p "$dir"
args=(--layers 1 --d-model 32 --heads 2 --context 16 --steps 400 --eval-every 0 --eval-batches 8
      --sample 0 --comm env)
loss() { sed -n 's/^final: .*held-out loss \([0-9.]*\) .*/\1/p' "$1"; }
for np in 2 4; do
  for run in adam onebit; do
    config=$adam
    [ "$run" = onebit ] && config=$onebit
    OMP_NUM_THREADS=1 "$@" -np "$np" "$demo" --config "$config" "${args[@]}" > "$dir/$run.$np.log" 2>&1 ||
      { echo "$run on $np ranks failed:"; tail -20 "$dir/$run.$np.log"; exit 1; }
    grep -q "| $np rank(s) |" "$dir/$run.$np.log" || { echo "$run did not run on $np ranks"; exit 1; }
  done
  grep -q "OneBitAdam: compressed communication starts at step 101" "$dir/onebit.$np.log" ||
    { echo "1-bit Adam did not enter its compression stage at step 101 on $np ranks"; exit 1; }
  a=$(loss "$dir/adam.$np.log") b=$(loss "$dir/onebit.$np.log")
  echo "held-out loss after 400 steps on $np ranks: AdamW $a, OneBitAdam $b"
  awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(a != "" && b != "" && a < 3.0 && d < 0.02) }' ||
    { echo "OneBitAdam's loss is not within 2% of AdamW's on $np ranks"; exit 1; }
done

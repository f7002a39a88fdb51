#!/usr/bin/env bash
# A 1-bit optimizer on the demo at 2 and 4 ranks under mpirun: 400 steps, against the same run with
# its uncompressed peer (AdamW, ds_config.json; Lamb, ds_config_lamb.json). The held-out losses
# must agree within 2%, and the run must print the line saying that its compressed stage started.
#   OneBitAdam (ds_config_onebit_adam.json): freeze_step 100, compression from step 101.
#   ZeroOneAdam (ds_config_zero_one_adam.json): var_freeze_step 100, local steps from step 102
#   (a sync every step for 100 steps, then every 2 steps).
#   OneBitLamb (ds_config_onebit_lamb.json, against Lamb): freeze_step 200, compression from step 201.
#   $1: dsrt_gpt_demo   $2: the peer's config   $3: the 1-bit config   $4: a scratch folder
#   $5: the line the run must print   $6...: mpirun and its flags
set -euo pipefail
demo=$1 adam=$2 onebit=$3 dir=$4 started=$5
shift 5
name=$(sed -n 's/.*"type": *"\([A-Za-z]*\)".*/\1/p' "$onebit" | head -1)
peer=$(sed -n 's/.*"type": *"\([A-Za-z]*\)".*/\1/p' "$adam" | head -1)
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
  grep -qF "$started" "$dir/onebit.$np.log" ||
    { echo "$name did not print \"$started\" on $np ranks"; exit 1; }
  a=$(loss "$dir/adam.$np.log") b=$(loss "$dir/onebit.$np.log")
  echo "held-out loss after 400 steps on $np ranks: $peer $a, $name $b"
  awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(a != "" && b != "" && a < 3.0 && d < 0.02) }' ||
    { echo "$name's loss is not within 2% of $peer's on $np ranks"; exit 1; }
done

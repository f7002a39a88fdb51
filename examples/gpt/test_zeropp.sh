#!/usr/bin/env bash
# ZeRO++ on the demo GPT under mpirun: ZeRO-3 with qwZ (zero_quantized_weights), qgZ
# (zero_quantized_gradients) and both, at 2 and 4 ranks (4 ranks as 2 nodes of 2 through
# DSRT_RANKS_PER_NODE, so qgZ runs both of its all-to-all stages), each ending within 2% of the
# held-out loss of plain ZeRO-3. Then checkpoints with both on: a run saved at step 12 and resumed
# to 30 matches an uninterrupted one bit for bit (master digest and losses), and the step-12
# checkpoint loads on 4 ranks (resharded) with the same master weights.
#   $1: dsrt_gpt_demo   $2: ds_config_zero3.json   $3: a scratch folder   $4...: mpirun and its flags
set -euo pipefail
demo=$1 config=$2 dir=$3
shift 3
rm -rf "$dir" && mkdir -p "$dir"
args=(--layers 1 --d-model 32 --heads 2 --context 16 --eval-every 0 --eval-batches 4 --sample 0 --comm env)
variant() {  # name, extra zero_optimization keys
  sed "s/\"stage\": *3/\"stage\": 3$2/" "$config" > "$dir/$1.json"
  grep -q "\"stage\": 3$2" "$dir/$1.json" || { echo "could not write $1.json"; exit 1; }
}
variant base ""
variant qwz ', "zero_quantized_weights": true'
variant qgz ', "zero_quantized_gradients": true'
variant both ', "zero_quantized_weights": true, "zero_quantized_gradients": true'
loss() { sed -n 's/^final: .*held-out loss \([0-9.]*\) .*/\1/p' "$1"; }
run() {  # log, ranks, config, extra demo args...
  local log=$1 np=$2 cfg=$3
  shift 3
  local env=()
  [ "$np" = 4 ] && env=(-x DSRT_RANKS_PER_NODE=2)
  OMP_NUM_THREADS=1 "${launcher[@]}" "${env[@]}" -np "$np" "$demo" --config "$dir/$cfg.json" "${args[@]}" "$@" \
    > "$log" 2>&1 || { echo "$log failed:"; tail -20 "$log"; exit 1; }
  grep -q "| $np rank(s) |" "$log" || { echo "$log did not run on $np ranks"; exit 1; }
}
launcher=("$@")
for np in 2 4; do
  for v in base qwz qgz both; do run "$dir/${v}_np$np.log" "$np" "$v" --steps 40; done
  base=$(loss "$dir/base_np$np.log")
  for v in qwz qgz both; do
    l=$(loss "$dir/${v}_np$np.log")
    echo "held-out loss after 40 steps on $np ranks: ZeRO-3 $base, $v $l"
    awk -v a="$base" -v b="$l" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(a != "" && b != "" && a < 4.4 && d < 0.02) }' ||
      { echo "$v on $np ranks is not within 2% of ZeRO-3"; exit 1; }
  done
done

# Checkpoints with qwZ and qgZ: exact resume on 2 ranks, and the same checkpoint on 4 ranks.
run "$dir/straight.log" 2 both --steps 30
run "$dir/first.log" 2 both --steps 12 --save "$dir/ckpt"
run "$dir/resumed.log" 2 both --steps 30 --load "$dir/ckpt"
grep -q "resumed from .* at step 12" "$dir/resumed.log" || { echo "the resumed run did not start at step 12"; exit 1; }
a=$(grep -E "^(fp32 master weights|final:)" "$dir/straight.log")
b=$(grep -E "^(fp32 master weights|final:)" "$dir/resumed.log")
echo "straight: $a"
echo "resumed:  $b"
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "resumed training differs from uninterrupted training"; exit 1; }
run "$dir/reshard.log" 4 both --steps 12 --load "$dir/ckpt"
digest() { sed -n 's/^fp32 master weights at step 12: digest \([0-9a-f]*\)$/\1/p' "$1"; }
d2=$(digest "$dir/first.log") d4=$(digest "$dir/reshard.log")
echo "master digest at step 12: saved on 2 ranks $d2, loaded on 4 ranks $d4"
[ -n "$d2" ] && [ "$d2" = "$d4" ] || { echo "the checkpoint did not reshard to 4 ranks"; exit 1; }
echo "ZeRO++ trains within 2% of ZeRO-3, resumes exactly and reshards"

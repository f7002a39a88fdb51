#!/usr/bin/env bash
# Runs rank_death (3 ranks, the last one dies) several times under mpirun --enable-recovery with
# a 2-second collective timeout (the config key "comm_timeout"). Each run must end within 30 s with every survivor reporting that
# it got DSRT_ERR_COMM and exited.
#   $1: mpirun   $2: the rank_death program   $3...: mpirun flags of the other multi-rank tests
set -uo pipefail
mpirun=$1
program=$2
shift 2
runs=${DSRT_RANK_DEATH_RUNS:-8}
for run in $(seq 1 "$runs"); do
  start=$SECONDS
  # The flags export DSRT_COMM_TIMEOUT_S=120: the program's config sets "comm_timeout": 2.
  output=$(timeout -k 5 30 "$mpirun" "$@" --enable-recovery -np 3 "$program" 2>&1)
  status=$?
  survivors=$(grep -c "got DSRT_ERR_COMM and exits" <<<"$output")
  if [ $status -eq 124 ] || [ $status -eq 137 ]; then
    echo "$output"
    echo "rank_death: run $run HUNG: killed after 30 s (the survivors did not exit)"
    exit 1
  fi
  if [ "$survivors" -ne 2 ]; then
    echo "$output"
    echo "rank_death: run $run: $survivors of 2 survivors reported DSRT_ERR_COMM and exited (mpirun status $status)"
    exit 1
  fi
  watchdog=$(grep -c "MPI_Finalize did not return" <<<"$output")
  echo "rank_death: run $run: both survivors exited after the timeout ($((SECONDS - start)) s, mpirun status" \
       "$status, $watchdog finalize watchdog(s) fired)"
done
echo "rank_death: passed"

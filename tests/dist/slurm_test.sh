#!/usr/bin/env bash
# A real single-node Slurm on localhost: munged, slurmctld and slurmd started as
# this test's own processes with a temporary slurm.conf (no systemd, no files
# outside a temporary folder), then one 2-task job through sbatch whose srun
# steps form an MPI world over PMIx. Exits 77 (skipped, with the reason) when
# Slurm or munge is missing or cannot be started here.
# Usage: slurm_test.sh HONE DIST_PROBE
set -uo pipefail
hone=$1 probe=$2

skip() { echo "SKIPPED: $*"; exit 77; }
for tool in munged slurmctld slurmd sbatch srun sinfo; do
  command -v "$tool" >/dev/null || skip "$tool not found (Debian: slurm-wlm munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start job steps"

dir=$(mktemp -d /tmp/hone-slurm.XXXXXX)
chmod 755 "$dir"  # munged wants a socket folder others can enter
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for f in "$dir"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  sleep 0.5
  rm -rf "$dir"
}
trap cleanup EXIT
show_logs() { for f in "$dir"/*.log; do echo "== $f"; tail -n 20 "$f"; done; }

dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" || { show_logs; skip "munged did not start"; }

host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<CONF
ClusterName=honetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -i -f "$SLURM_CONF" || { show_logs; skip "slurmctld did not start"; }
slurmd -N "$host" -f "$SLURM_CONF" || { show_logs; skip "slurmd did not start"; }
for _ in $(seq 50); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %T 2>/dev/null | grep -q idle || { show_logs; skip "the Slurm node did not come up"; }

cat >"$dir/job.sh" <<JOB
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --nodes=1
#SBATCH --time=2
export OMP_NUM_THREADS=1 HONE_DIST_TIMEOUT=30
echo "batch step: \$("$probe" sum)"
srun --mpi=pmix "$probe" sum
srun --mpi=pmix "$hone" comm-bench --op all_reduce --min-bytes 1024 --max-bytes 1024 --iters 2 --warmup 1
srun --mpi=none "$probe" sum
echo "srun without PMIx: status \$?"
# examples/slurm/multi_node.sbatch's mode B: one hone launch per node, which
# starts the node's ranks (the step's own --ntasks: srun takes the job's 2 otherwise).
srun --ntasks="\$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task=2 bash -c \
  '"\$0" launch --nproc-per-node 2 --nnodes "\$SLURM_NNODES" --node-rank "\$SLURM_NODEID" -- "\$1" sum' \
  "$hone" "$probe"
JOB
timeout 120 sbatch --wait --output="$dir/job.out" "$dir/job.sh"
status=$?
cat "$dir/job.out"
[ $status -eq 0 ] || { show_logs; echo "FAILED: sbatch --wait exited with $status"; exit 1; }

failed=0
expect() {
  grep -qF -- "$1" "$dir/job.out" || { echo "FAILED: the job's output lacks: $1"; failed=1; }
}
# The batch script itself is no rank (sbatch sets SLURM_PROCID there too).
expect "batch step: rank 0 of 1 (local, RANK=-, LOCAL_RANK=-): sum 1"
expect "rank 0 of 2 (mpi, RANK=-, LOCAL_RANK=-): sum 3"
expect "rank 1 of 2 (mpi, RANK=-, LOCAL_RANK=-): sum 3"
expect "# hone comm-bench: 2 ranks, backend mpi, device cpu"
expect "hone: error: srun says this is rank 0 of 2, but no MPI runtime started this process"
expect "srun without PMIx: status 2"
expect "[rank 1] rank 1 of 2 (mpi, RANK=1, LOCAL_RANK=1): sum 3"
[ $failed -eq 0 ] || { show_logs; exit 1; }
echo "Slurm job of 2 tasks passed"

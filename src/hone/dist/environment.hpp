#pragma once
// Rank discovery: who this process is in a multi-process job, read from the
// variables its launcher set. Launchers, in the order they are believed:
//   torchrun and `hone launch`: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                               MASTER_ADDR, MASTER_PORT
//   Open MPI's mpirun:          OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm's srun:               SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS),
//                               SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, SLURM_NODELIST
// The order matters when launchers nest: `hone launch` inside an sbatch job, or
// mpirun inside one, sets its own variables over Slurm's.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hone/core/device.hpp"

namespace hone::dist {

struct ProcessInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // index among the processes of this node
  int local_world_size = 1;  // processes on this node
  std::string master_addr;   // rendezvous host (torchrun env, or Slurm's first node)
  int master_port = 0;
  std::string launcher = "none";  // "torchrun", "openmpi", "slurm" or "none"
};

// Looks a variable up; returns nullptr when it is not set.
using EnvLookup = std::function<const char*(const char*)>;

// Throws hone::Error naming the variable when one is malformed or inconsistent
// (a rank outside the world, a world size below 1).
ProcessInfo discover_process(const EnvLookup& env);
ProcessInfo discover_process();  // from this process's environment

// The device this rank computes on when the run asks for `requested`: the CPU
// as asked; on CUDA with several processes on the node, the GPU of its local
// rank, or the only one CUDA_VISIBLE_DEVICES leaves it (Slurm's
// --gpus-per-task=1 binds one GPU to each task); a lone process, the GPU asked for.
Device rank_device(const ProcessInfo& p, Device requested, const EnvLookup& env);
Device rank_device(const ProcessInfo& p, Device requested);  // from this process's environment

// Expands Slurm's compressed host lists: "node[01-03,07],gpu5" ->
// node01 node02 node03 node07 gpu5. Zero padding is kept; several bracket
// groups in one name multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). With a
// limit, the first `limit` names (the list after them is not read).
std::vector<std::string> expand_slurm_nodelist(std::string_view list, size_t limit = SIZE_MAX);

}  // namespace hone::dist

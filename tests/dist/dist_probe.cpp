// A small distributed program for the tests: the ways a rank can fail, and one
// all_reduce to show a world formed. Usage: dist_probe sum|hang|exit|kill|throw|hang-recv|hang-at-start
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "hone/core/error.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/dist/mpi_watchdog.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sum";
  // Rank 1 (as mpirun numbers it) stops once MPI is up, before any communicator is made.
  const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mode == "hang-at-start" && mpi_rank != nullptr && std::string(mpi_rank) == "1") {
    hone::dist::ensure_mpi_initialized();
    pause();
  }
  try {
    auto comm = hone::dist::Communicator::from_environment();
    const int rank = comm->rank();
    hone::Tensor t = hone::Tensor::from(std::vector<double>{double(rank + 1)}, hone::Shape{1});
    comm->all_reduce(t);  // everyone is up
    fmt::print("rank {} of {} ({}, RANK={}, LOCAL_RANK={}): sum {}\n", rank, comm->size(), comm->backend(),
               std::getenv("RANK") ? std::getenv("RANK") : "-", std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "-",
               t.data<double>()[0]);
    std::fflush(stdout);
    if (rank == 1 && mode == "hang") pause();
    if (rank == 1 && mode == "exit") std::exit(3);
    if (rank == 1 && mode == "kill") raise(SIGKILL);  // as the OOM killer would
    if (rank == 1 && mode == "throw") hone::fail("rank 1 gave up on purpose");
    if (mode == "hang-recv") {
      if (rank == 1) pause();
      comm->recv(t, 1);
    }
    comm->all_reduce(t);
    comm->barrier();
    return 0;
  } catch (const hone::Error& e) {
    fmt::print(stderr, "hone: error: {}\n", e.what());
    return 2;
  }
}

// Rank discovery, the local communicator, the plan's arithmetic, and real jobs:
// mpirun and `hone launch` running dist_probe (a hung rank, a rank that exits,
// one that fails), hone comm-bench's table and hone plan's JSON.
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <sys/wait.h>

#include "hone/core/error.hpp"
#include "hone/dist/communicator.hpp"
#include "hone/dist/environment.hpp"
#include "hone/dist/mesh.hpp"
#include "hone/dist/plan.hpp"
#include "hone/core/files.hpp"
#include "hone/model/activations.hpp"
#include "hone/train/run_config.hpp"
#include "support/check.hpp"

namespace hone::dist {
namespace {

using Env = std::map<std::string, std::string>;

ProcessInfo discover(const Env& env) {
  return discover_process([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Environment, NoLauncherIsAWorldOfOne) {
  const ProcessInfo p = discover({});
  EXPECT_EQ(p.launcher, "none");
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.world_size, 1);
}

TEST(Environment, Torchrun) {
  const ProcessInfo p = discover({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                                  {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(p.launcher, "torchrun");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_EQ(p.master_addr, "node01");
  EXPECT_EQ(p.master_port, 29500);
}

TEST(Environment, OpenMpi) {
  const ProcessInfo p = discover({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(p.launcher, "openmpi");
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 2);
}

// Which GPU a rank computes on: its local rank's, unless the launcher left it
// exactly one (srun --gpus-per-task=1); a lone process keeps the one asked for.
TEST(Environment, RankDeviceFollowsTheLocalRankAndTheVisibleGpus) {
  const ProcessInfo alone = discover({});
  const ProcessInfo second = discover({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"}});
  const auto env = [](const char* visible) {
    return [visible](const char* name) -> const char* {
      return std::string_view(name) == "CUDA_VISIBLE_DEVICES" ? visible : nullptr;
    };
  };
  EXPECT_EQ(rank_device(alone, Device::cuda(3), env(nullptr)), Device::cuda(3));
  EXPECT_EQ(rank_device(alone, Device::cpu(), env(nullptr)), Device::cpu());
  EXPECT_EQ(rank_device(second, Device::cpu(), env("5")), Device::cpu());
  EXPECT_EQ(rank_device(second, Device::cuda(), env(nullptr)), Device::cuda(1));
  EXPECT_EQ(rank_device(second, Device::cuda(), env("0,1")), Device::cuda(1));
  EXPECT_EQ(rank_device(second, Device::cuda(), env("")), Device::cuda(1));
  EXPECT_EQ(rank_device(second, Device::cuda(), env("5")), Device::cuda(0));  // the one GPU srun bound to this task
}

TEST(Environment, SlurmTaskOfAStep) {
  const ProcessInfo p = discover({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_STEP_NUM_TASKS", "6"},
                                  {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"}, {"SLURM_STEP_ID", "0"},
                                  {"SLURM_STEP_TASKS_PER_NODE", "2(x2),3"}, {"SLURM_JOB_ID", "123456"},
                                  {"SLURM_STEP_NODELIST", "gpu[07-09]"}});
  EXPECT_EQ(p.launcher, "slurm");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 6);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 3);  // the third node has 3 tasks
  EXPECT_EQ(p.master_addr, "gpu07");
  EXPECT_EQ(p.master_port, 20000 + 123456 % 20000);
}

TEST(Environment, SlurmBatchScriptIsNotARank) {
  // sbatch sets SLURM_PROCID=0 of SLURM_NTASKS in the batch script itself.
  EXPECT_EQ(discover({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "n1"}}).world_size, 1);
  EXPECT_EQ(discover({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "batch"}}).world_size, 1);
}

TEST(Environment, LaunchersNestInPriorityOrder) {
  // hone launch inside an sbatch job step: its own variables win over Slurm's, and mpirun's over Slurm's.
  const Env slurm{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_STEP_ID", "0"}};
  Env launched = slurm;
  launched.insert({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(discover(launched).launcher, "torchrun");
  Env mpi = slurm;
  mpi.insert({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(discover(mpi).launcher, "openmpi");
  EXPECT_EQ(discover(mpi).rank, 1);
}

TEST(Environment, MalformedValuesAreErrorsNamingTheVariable) {
  auto message = [](const Env& env) {
    try {
      discover(env);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("rank 2 is outside the world of 2"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}}).find("RANK and WORLD_SIZE"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("at least 1"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("not a port"),
            std::string::npos);
  // Slurm's lists (was: a repeat count that is no number read as 1, and errors naming no variable).
  const Env step{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_STEP_ID", "0"}};
  for (const char* bad : {"2(xA),1", "2(x),1", "2(x2,1", "x2", "2,,1", "0"}) {
    Env env = step;
    env["SLURM_STEP_TASKS_PER_NODE"] = bad;
    EXPECT_NE(message(env).find(std::string("environment variable SLURM_STEP_TASKS_PER_NODE='") + bad +
                                "' is malformed (Slurm writes tasks per node as 2(x3),1)"),
              std::string::npos)
        << bad << ": " << message(env);
  }
  Env few = step;
  few.insert({{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_NODEID", "2"}});
  EXPECT_NE(message(few).find("environment variable SLURM_STEP_TASKS_PER_NODE='2(x2)' lists fewer nodes than "
                              "SLURM_NODEID"),
            std::string::npos)
      << message(few);
  Env nodes = step;
  nodes["SLURM_JOB_NODELIST"] = "gpu[07-";
  EXPECT_NE(message(nodes).find("environment variable SLURM_JOB_NODELIST: Slurm node list"), std::string::npos)
      << message(nodes);
  // The first host alone is expanded: a huge list is no wait.
  nodes["SLURM_JOB_NODELIST"] = "n[0-999999999],m[1-9]";
  EXPECT_EQ(discover(nodes).master_addr, "n0");
}

TEST(Environment, SlurmNodelists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node01"), V{"node01"});
  EXPECT_EQ(expand_slurm_nodelist("node[01-03,07]"), (V{"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(expand_slurm_nodelist("a[8-10],b1"), (V{"a8", "a9", "a10", "b1"}));
  EXPECT_EQ(expand_slurm_nodelist("gpu[098-101]"), (V{"gpu098", "gpu099", "gpu100", "gpu101"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[1,3]"), (V{"r1n1", "r1n3", "r2n1", "r2n3"}));
  EXPECT_EQ(expand_slurm_nodelist("x[3]-ib,y"), (V{"x3-ib", "y"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[1,3],z", 3), (V{"r1n1", "r1n3", "r2n1"}));
  for (const char* bad : {"node[01-03", "node[a-b]", "node[3-1]", "n1,,n2", "node]1["}) {
    EXPECT_THROW(expand_slurm_nodelist(bad), Error) << bad;
  }
}

TEST(LocalCommunicator, CollectivesOfOneAreCopies) {
  LocalCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  Tensor t = Tensor::from(std::vector<float>{1, 2, 3}, Shape{3});
  c.all_reduce(t);
  c.broadcast(t, 0);
  c.barrier();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor out = Tensor::zeros(Shape{1, 3}, DType::f32);
  c.all_gather(t, out);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor scattered = Tensor::zeros(Shape{3}, DType::f32);
  c.reduce_scatter(out, scattered);
  EXPECT_EQ(scattered.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor reduced = Tensor::zeros(Shape{3}, DType::f32);
  c.start_reduce(t, reduced, 0)->wait();
  EXPECT_EQ(reduced.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(c.reduce(t, Tensor(), 0), Error);
  EXPECT_THROW(c.all_gather(t, Tensor::zeros(Shape{4}, DType::f32)), Error);
  EXPECT_THROW(c.broadcast(t, 1), Error);
  EXPECT_THROW(c.send(t, 0), Error);
  EXPECT_THROW(c.recv(t, 1), Error);
  EXPECT_EQ(c.split(0, 0)->size(), 1);
  DeviceMesh mesh(c, 1, 1);
  EXPECT_EQ(mesh.dp().size(), 1);
  EXPECT_EQ(mesh.tp().size(), 1);
  EXPECT_THROW(DeviceMesh(c, 2, 1), Error);
}

TEST(LocalCommunicator, FromAnEnvironmentWithoutLauncher) {
  for (const char* v : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) unsetenv(v);
  EXPECT_EQ(Communicator::from_environment()->backend(), "local");
}

// A model small enough to count by hand: per layer 2·64 (norms) + 192·64 (qkv:
// 4 + 2·4 heads of 16) + 64·64 (out) + 256·64 (gate|up) + 128·64 (down) = 41088;
// 2 layers + the final norm = 82240; embeddings 2·1000·64 untied: N = 210240.
ModelConfig small_model() {
  ModelConfig m = model_preset("llama_tiny");
  m.vocab_size = 1000;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.ffn_dim = 128;
  m.max_seq_len = 64;
  m.tie_embeddings = false;
  return m;
}

PlanInput small_plan(int zero) {
  PlanInput in;
  in.model = small_model();
  in.dtype = DType::bf16;
  in.micro_batch = 2;
  in.seq_len = 32;
  in.grad_accum = 4;
  in.dp = 4;
  in.tp = 2;
  in.zero = zero;
  in.mfu = 0.5;
  in.tokens = 1e6;
  in.hw = {.peak_flops = 1e12, .memory_bytes = 1e9, .intra_node_bw = 1e9, .inter_node_bw = 1e8, .devices_per_node = 4};
  return in;
}

TEST(Plan, MatchesAHandCalculation) {
  ASSERT_EQ(small_model().num_params(), 210240);
  const Plan p = plan_run(small_plan(1));
  // tp 2 splits each layer's projections (qkv 192·64, out 64·64, up 256·64,
  // down 64·128: 40960 per rank) and the vocabulary of 1000 (embeddings and
  // head, 64000 per rank), and holds the norms' 320 whole: 320 + 40960 + 64000
  // = 105280 parameters per tp rank. ZeRO-1 shards AdamW's 8 B over dp = 4.
  ASSERT_EQ(small_model().num_params_per_rank(2), 105280);
  ModelConfig odd = small_model();  // a vocabulary tp 2 cannot split: every rank holds all of it
  odd.vocab_size = 999;
  EXPECT_EQ(odd.num_params_per_rank(2), odd.num_params() - 40960);
  EXPECT_DOUBLE_EQ(p.weights, 4 * 105280.0);
  EXPECT_DOUBLE_EQ(p.gradients, 4 * 105280.0);
  EXPECT_DOUBLE_EQ(p.optimizer, 8 * 105280.0 / 4);
  EXPECT_DOUBLE_EQ(p.compute_copy, 2 * 105280.0);
  EXPECT_DOUBLE_EQ(p.gathered, 0);
  // Planned as on GPUs: each rank's 500 classes in rows of logits padded to 504.
  const ActivationOptions on_gpus{.tp = 2, .head_weight_gradient = true, .padded_logit_rows = true};
  EXPECT_DOUBLE_EQ(p.activations, double(activation_bytes(small_model(), DType::bf16, 2, 32, on_gpus)));
  EXPECT_GT(p.activations, double(activation_bytes(small_model(), DType::bf16, 2, 32, {.tp = 2})));
  EXPECT_DOUBLE_EQ(p.total, 4 * 105280.0 * 2 + 2 * 105280.0 + 2 * 105280.0 + p.activations);
  // 2·32·4 = 256 tokens per replica, 1024 per step; FLOPs per token
  // 6·(82240 + 64000) + 12·2·4·16·32 = 926592, split over tp 2.
  EXPECT_DOUBLE_EQ(p.tokens_per_step, 1024);
  EXPECT_DOUBLE_EQ(p.flops, 926592.0 * 256 / 2);
  EXPECT_DOUBLE_EQ(p.compute_s, 118603776.0 / 0.5e12);
  // reduce_scatter fp32 gradients + all_gather bf16 weights: 3/4 · 6 B · 105280;
  // 8 devices over nodes of 4: between nodes at 1e8 B/s.
  EXPECT_DOUBLE_EQ(p.dp_bytes, 473760);
  EXPECT_TRUE(p.dp_inter_node);
  EXPECT_DOUBLE_EQ(p.dp_s, 473760 / 1e8);
  // tp: 4 micro-batches · (2 layers · 4 + 2 for the split vocabulary) all_reduces'
  // worth · 2·(1/2) · (2·32·64·2 B), and the all_reduce of the 320 whole
  // parameters' fp32 gradients, in a node.
  EXPECT_DOUBLE_EQ(p.tp_bytes, 4 * 10 * 8192.0 + 4 * 320.0);
  EXPECT_FALSE(p.tp_inter_node);
  EXPECT_DOUBLE_EQ(p.tp_s, 328960 / 1e9);
  EXPECT_NEAR(p.step_s, 2.37207552e-4 + 4.7376e-3 + 3.2896e-4, 1e-15);
  EXPECT_NEAR(p.step_overlap_s, 4.7376e-3 + 3.2896e-4, 1e-15);
  EXPECT_DOUBLE_EQ(p.steps, 977);  // ceil(1e6 / 1024)
  EXPECT_NEAR(p.train_s, 977 * p.step_s, 1e-12);
  EXPECT_TRUE(p.fits);
}

// Activation checkpointing computes each layer's forward pass again: a third
// more compute time, the model FLOPs (MFU's) the same.
TEST(Plan, CheckpointingTakesAThirdMoreComputeTime) {
  PlanInput recomputing = small_plan(1);
  recomputing.activation_checkpointing = true;
  const Plan plain = plan_run(small_plan(1)), checkpointed = plan_run(recomputing);
  EXPECT_DOUBLE_EQ(checkpointed.flops, plain.flops);
  EXPECT_DOUBLE_EQ(checkpointed.compute_s, plain.compute_s * 4 / 3);
  EXPECT_LT(checkpointed.total, plain.total);
}

TEST(Plan, ZeroStagesShardMoreAndSendWhatTheyMust) {
  const Plan z0 = plan_run(small_plan(0)), z2 = plan_run(small_plan(2)), z3 = plan_run(small_plan(3));
  EXPECT_DOUBLE_EQ(z0.optimizer, 8 * 105280.0);
  EXPECT_DOUBLE_EQ(z0.dp_bytes, 2 * 0.75 * 4 * 105280);               // all_reduce of fp32 gradients
  // The shard, and three units' gradients: a tp rank's 32000 rows of the
  // embedding table, more than its part of a layer (20640, below).
  EXPECT_DOUBLE_EQ(z2.gradients, 4 * 105280.0 / 4 + 4 * 3 * 32000.0);
  EXPECT_DOUBLE_EQ(z2.dp_bytes, 0.75 * (4 * 4 * 105280.0 + 2 * 105280));  // reduce_scatter per micro-batch
  EXPECT_DOUBLE_EQ(z3.weights, 4 * 105280.0 / 4);
  EXPECT_DOUBLE_EQ(z3.compute_copy, 0);
  // Two units, each a tp rank's 32000 rows of the embedding table (more than
  // its part of a layer, (82240 - 81920 + 40960) / 2 = 20640), at 4 + 2 + 4
  // bytes (fp32 weights, their bf16 cast, fp32 gradients), and a layer's
  // gradients in flight.
  EXPECT_DOUBLE_EQ(z3.gathered, 2 * 32000 * 10.0 + 4 * 20640);
  // Gathers for forward and backward: the 72960 projection and head weights
  // (40960 + 32000) as bf16, the other 32320 as fp32; fp32 gradients.
  EXPECT_DOUBLE_EQ(z3.dp_bytes, 4 * 0.75 * (2 * (2 * 72960 + 4 * 32320) + 4 * 105280.0));
  PlanInput one = small_plan(3);
  one.dp = 1;
  EXPECT_DOUBLE_EQ(plan_run(one).dp_bytes, 0);
  PlanInput bad = small_plan(4);
  EXPECT_THROW(plan_run(bad), Error);
  bad = small_plan(1);
  bad.tp = 3;
  EXPECT_THROW(plan_run(bad), Error);
  bad.tp = 2;
  bad.model.ffn_dim = 129;  // the run refuses it (was: planned)
  EXPECT_THROW(plan_run(bad), Error);
}

TEST(MemoryEstimate, PerRankShardsWhatHonesZeroStagesShard) {
  const ModelConfig m = small_model();  // 210240 parameters, untied
  const double n = 210240;
  const auto at = [&](int zero, int ranks) {
    return estimate_training_memory(m, DType::bf16, 2, 32, {}, std::nullopt, zero, ranks);
  };
  const MemoryEstimate one = at(3, 1), z1 = at(1, 4), z2 = at(2, 4), z3 = at(3, 4);
  EXPECT_EQ(one.zero, 0);  // one rank shards nothing
  EXPECT_EQ(double(one.parameters + one.gradients + one.optimizer + one.compute_copy), (4 + 4 + 8 + 2) * n);
  EXPECT_EQ(double(z1.optimizer), 8 * n / 4);
  EXPECT_EQ(double(z2.gradients), 4 * n / 4 + zero2_unit_gradient_bytes(m));  // the shard, the units at hand
  EXPECT_EQ(double(z3.parameters), 4 * n / 4);
  EXPECT_EQ(double(z3.gradients), 4 * n / 4);
  EXPECT_EQ(z3.compute_copy, 0u);
  EXPECT_EQ(double(z3.gathered), zero3_gathered_bytes(m, DType::bf16));
  EXPECT_EQ(z3.activations, one.activations);
}

// ---- real jobs ----

struct Job {
  int status = -1;
  std::string output;
  double seconds = 0;
};

// Runs a shell command (stdout and stderr together) under `timeout`.
Job run(const std::string& command, int timeout_s = 60) {
  const auto start = std::chrono::steady_clock::now();
  Job j;
  FILE* pipe = popen(("timeout -k 5 " + std::to_string(timeout_s) + " " + command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) j.output.append(buffer, n);
  const int raw = pclose(pipe);
  j.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  j.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return j;
}

std::string mpirun(int ranks) {
  return "mpirun -np " + std::to_string(ranks) + " --oversubscribe --bind-to none" +
         (geteuid() == 0 ? " --allow-run-as-root" : "");
}

const std::string kHone = std::string(HONE_BINARY_DIR) + "/bin/hone";
const std::string kProbe = DIST_PROBE;

TEST(Jobs, AHungRankEndsTheJobWithinTheTimeoutNamingIt) {
  const Job j = run("env HONE_DIST_TIMEOUT=3 " + mpirun(2) + " " + kProbe + " hang");
  EXPECT_NE(j.status, 0) << j.output;
  EXPECT_LT(j.seconds, 25) << j.output;
  EXPECT_NE(j.output.find("hone: error: rank 0: all_reduce #2 (1 elements) in world did not complete within 3 s "
                          "(HONE_DIST_TIMEOUT): rank 1 has not called it"),
            std::string::npos)
      << j.output;
}

// A rank stopped while the job starts, before the communicators are made
// (was: the others waited in MPI_Comm_dup forever).
TEST(Jobs, ARankHungWhileTheWorldFormsEndsTheJob) {
  const Job j = run("env HONE_DIST_TIMEOUT=3 " + mpirun(2) + " " + kProbe + " hang-at-start");
  EXPECT_NE(j.status, 0) << j.output;
  EXPECT_LT(j.seconds, 25) << j.output;
  EXPECT_NE(j.output.find("hone: error: rank 0: creating the communicator world (MPI_Comm_dup) did not complete "
                          "within 3 s (HONE_DIST_TIMEOUT): a rank of it has not joined (hung, stopped or dead); "
                          "aborting the job"),
            std::string::npos)
      << j.output;
}

TEST(Jobs, AHungPeerOfARecvIsNamed) {
  const Job j = run("env HONE_DIST_TIMEOUT=3 " + mpirun(2) + " " + kProbe + " hang-recv");
  EXPECT_NE(j.status, 0) << j.output;
  EXPECT_LT(j.seconds, 25) << j.output;
  EXPECT_NE(j.output.find("rank 0: recv from rank 1 (1 elements) in world did not complete within 3 s"),
            std::string::npos)
      << j.output;
  EXPECT_NE(j.output.find("rank 1 has not posted the matching send"), std::string::npos) << j.output;
}

// A HONE_DIST_TIMEOUT that is no number is each rank's one-line error (it was
// thrown again at exit, where it aborted every rank with a backtrace).
TEST(Jobs, ABadTimeoutIsAnErrorNotAnAbort) {
  const Job j = run("env HONE_DIST_TIMEOUT=abc " + mpirun(2) + " " + kProbe + " sum");
  EXPECT_EQ(j.status, 2) << j.output;
  EXPECT_NE(j.output.find("hone: error: HONE_DIST_TIMEOUT='abc' should be a number of seconds (0: no timeout)"),
            std::string::npos)
      << j.output;
  EXPECT_EQ(j.output.find("terminate called"), std::string::npos) << j.output;
}

TEST(Jobs, ARankThatExitsEndsTheJobAtOnce) {
  // A failing exit status becomes MPI_Abort, so mpirun stops the others long before the 60 s watchdog.
  const Job j = run("env HONE_DIST_TIMEOUT=60 " + mpirun(2) + " " + kProbe + " exit");
  EXPECT_EQ(j.status, 3) << j.output;
  EXPECT_LT(j.seconds, 20) << j.output;
  EXPECT_NE(j.output.find("hone: rank 1 exited with status 3; ending the MPI job"), std::string::npos) << j.output;
}

TEST(Jobs, ARankThatIsKilledEndsTheJobAtOnce) {
  const Job j = run("env HONE_DIST_TIMEOUT=60 " + mpirun(2) + " " + kProbe + " kill");
  EXPECT_NE(j.status, 0) << j.output;
  EXPECT_LT(j.seconds, 20) << j.output;
  EXPECT_NE(j.output.find("process rank 1 with PID"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("exited on signal 9 (Killed)"), std::string::npos) << j.output;
}

TEST(Jobs, ARankWithAnErrorEndsTheJobAtOnce) {
  const Job j = run("env HONE_DIST_TIMEOUT=60 " + mpirun(2) + " " + kProbe + " throw");
  EXPECT_NE(j.status, 0) << j.output;
  EXPECT_LT(j.seconds, 20) << j.output;
  EXPECT_NE(j.output.find("hone: error: rank 1 gave up on purpose"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("hone: rank 1 exited with status 2; ending the MPI job"), std::string::npos) << j.output;
}

TEST(Jobs, LaunchStartsRanksWithTorchrunEnvironmentAndPrefixesTheirOutput) {
  const std::string logs = testing::TempDir() + "launch_logs";
  std::filesystem::remove_all(logs);
  const Job j = run(kHone + " launch --nproc-per-node 2 --log-dir " + logs + " -- " + kProbe + " sum");
  ASSERT_EQ(j.status, 0) << j.output;
  EXPECT_NE(j.output.find("[rank 0] rank 0 of 2 (mpi, RANK=0, LOCAL_RANK=0): sum 3\n"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("[rank 1] rank 1 of 2 (mpi, RANK=1, LOCAL_RANK=1): sum 3\n"), std::string::npos) << j.output;
  EXPECT_EQ(read_file(logs + "/rank_1.log"), "rank 1 of 2 (mpi, RANK=1, LOCAL_RANK=1): sum 3\n");
}

// torchrun's spellings: underscores, --standalone, --rdzv-endpoint for the
// master's address and port, --rdzv-backend and --rdzv-id accepted; --max-restarts
// (restarts hone launch does not make) refused, naming what resumes a run.
TEST(Jobs, LaunchTakesTorchrunsFlags) {
  const Job j = run(kHone + " launch --nproc_per_node 2 --standalone --rdzv-endpoint 127.0.0.1:29511 --rdzv-backend "
                            "c10d --rdzv_id 7 -- sh -c 'echo \"$MASTER_ADDR $MASTER_PORT\"'");
  ASSERT_EQ(j.status, 0) << j.output;
  EXPECT_NE(j.output.find("[rank 1] 127.0.0.1 29511\n"), std::string::npos) << j.output;
  const Job restarts = run(kHone + " launch --nproc-per-node 2 --max-restarts 3 -- true");
  EXPECT_EQ(restarts.status, 2) << restarts.output;
  EXPECT_NE(restarts.output.find("--max-restarts 3: hone launch does not restart failed ranks"), std::string::npos)
      << restarts.output;
}

// mpirun tags each piece a rank writes: a line written in two pieces, with the
// other rank's pieces between them, comes out whole behind its rank's prefix.
TEST(Jobs, LaunchKeepsALineWrittenInPiecesWhole) {
  const Job j = run(kHone + " launch --nproc-per-node 2 -- bash -c 'printf \"first half, \"; sleep 0.5; "
                            "echo \"second half\"; printf \"no newline\"'");
  ASSERT_EQ(j.status, 0) << j.output;
  for (const char* rank : {"[rank 0] ", "[rank 1] "}) {
    EXPECT_NE(j.output.find(std::string(rank) + "first half, second half\n"), std::string::npos) << j.output;
    EXPECT_NE(j.output.find(std::string(rank) + "no newline\n"), std::string::npos) << j.output;
  }
  EXPECT_EQ(j.output.find("<stdout>"), std::string::npos) << j.output;
}

TEST(Jobs, LaunchNamesTheRankThatFailed) {
  const Job exited = run(kHone + " launch --nproc-per-node 2 -- " + kProbe + " exit");
  EXPECT_EQ(exited.status, 3) << exited.output;
  EXPECT_NE(exited.output.find("hone launch: rank 1 failed with status 3"),
            std::string::npos)
      << exited.output;
  // A rank's error: its line and the summary, without mpirun's MPI_Abort help text around them.
  const Job failed = run(kHone + " launch --nproc-per-node 2 -- " + kProbe + " throw");
  EXPECT_EQ(failed.status, 2) << failed.output;
  EXPECT_NE(failed.output.find("[rank 1] hone: error: rank 1 gave up on purpose"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("hone launch: rank 1 failed with status 2"), std::string::npos) << failed.output;
  for (const char* noise : {"MPI_ABORT", "help message", "ORTE_ERROR_LOG", "-----"}) {
    EXPECT_EQ(failed.output.find(noise), std::string::npos) << noise << "\n" << failed.output;
  }
  // Any command, its failure as one line: told by the process that runs it
  // (mpirun's own report of it is at times lost as it stops the other ranks).
  for (int i = 0; i < 3; ++i) {
    const Job shell = run(kHone + " launch --nproc-per-node 2 -- sh -c '[ \"$RANK\" = 1 ] && exit 4; sleep 1'");
    EXPECT_EQ(shell.status, 4) << shell.output;
    EXPECT_NE(shell.output.find("hone launch: rank 1 failed with status 4"), std::string::npos) << shell.output;
    EXPECT_EQ(shell.output.find("-----"), std::string::npos) << shell.output;
  }
  const Job crashed = run(kHone + " launch --nproc-per-node 2 -- sh -c '[ \"$RANK\" = 1 ] && kill -SEGV $$; sleep 1'");
  EXPECT_EQ(crashed.status, 128 + SIGSEGV) << crashed.output;
  EXPECT_NE(crashed.output.find("hone launch: rank 1 was killed by signal 11 (Segmentation fault); the job of 2 "
                                "ranks was stopped"),
            std::string::npos)
      << crashed.output;
  EXPECT_EQ(crashed.output.find("-----"), std::string::npos) << crashed.output;
  const Job killed = run(kHone + " launch --nproc-per-node 2 -- " + kProbe + " kill");
  EXPECT_NE(killed.status, 0) << killed.output;
  EXPECT_NE(killed.output.find("hone launch: rank 1 was killed by signal 9 (Killed); the job of 2 ranks was stopped"),
            std::string::npos)
      << killed.output;
  const Job hung = run("env HONE_DIST_TIMEOUT=3 " + kHone + " launch --nproc-per-node 2 -- " + kProbe + " hang");
  EXPECT_NE(hung.status, 0) << hung.output;
  EXPECT_NE(hung.output.find("[rank 0] hone: error: rank 0: all_reduce #2"), std::string::npos) << hung.output;
  EXPECT_NE(hung.output.find("rank 1 has not called it"), std::string::npos) << hung.output;
  EXPECT_NE(hung.output.find("hone launch: rank 0 gave up on all_reduce #2 (1 elements) in world after 3 s: rank 1 "
                             "has not called it"),
            std::string::npos)
      << hung.output;
}

TEST(Jobs, LaunchForwardsSigtermToTheRanks) {
  // A SIGTERM (scancel, a preempting scheduler) after 2 s ends the hung job: no
  // rank is left behind; nor when the launcher itself is killed outright.
  for (const std::string signal : {"TERM", "KILL"}) {
    SCOPED_TRACE(signal);
    const std::string marker = "sig" + signal + "-test-" + std::to_string(getpid());  // names this job's ranks
    const Job j = run("env HONE_DIST_TIMEOUT=60 timeout -s " + signal + " 2 " + kHone +
                      " launch --nproc-per-node 2 -- " + kProbe + " hang " + marker);
    EXPECT_EQ(j.status, signal == "TERM" ? 124 : 137) << j.output;
    EXPECT_NE(j.output.find("[rank 1] rank 1 of 2"), std::string::npos) << j.output;
    Job left;
    for (int i = 0; i < 50; ++i) {  // mpirun takes a moment to stop its ranks
      left = run("pgrep -f '[" + marker.substr(0, 1) + "]" + marker.substr(1) + "'");  // not matching pgrep's own shell
      if (left.output.empty()) break;
      usleep(100000);
    }
    EXPECT_EQ(left.output, "") << "ranks still running after SIG" << signal << ": " << run("ps -ef").output;
    run("pkill -KILL -f '[" + marker.substr(0, 1) + "]" + marker.substr(1) + "'");
  }
}

// launch-rank, what mpirun starts for a command that is not hone, is hone launch's alone.
TEST(Jobs, LaunchRankIsLaunchsOwn) {
  const Job j = run("env -u LOCAL_RANK " + kHone + " launch-rank -- true");
  EXPECT_EQ(j.status, 2) << j.output;
  EXPECT_NE(j.output.find("hone launch-rank runs one rank's command for hone launch, which sets LOCAL_RANK"),
            std::string::npos)
      << j.output;
  EXPECT_EQ(run(kHone + " --help").output.find("launch-rank"), std::string::npos);
}

// A command that is not hone gets the first SIGTERM too, through the process that runs it.
TEST(Jobs, LaunchForwardsSigtermToAnyCommand) {
  const Job j = run("timeout -s TERM 2 " + kHone + " launch --nproc-per-node 2 -- sh -c "
                    "'sleep 30 & s=$!; trap \"echo rank $RANK saves; kill $s; exit 0\" TERM; wait'");
  EXPECT_EQ(j.status, 124) << j.output;  // timeout's status: the job itself ended cleanly
  for (const char* line : {"[rank 0] rank 0 saves\n", "[rank 1] rank 1 saves\n"}) {
    EXPECT_NE(j.output.find(line), std::string::npos) << line << "\n" << j.output;
  }
  EXPECT_EQ(j.output.find("hone launch:"), std::string::npos) << j.output;
}

TEST(Jobs, LaunchOnOneOfSeveralNodesNeedsNcclOrMpirunForCpuWorlds) {
  // Each node's hone launch forms its own MPI world: a CPU job across nodes is refused, clearly.
  const Job j = run(kHone + " launch --nproc-per-node 2 --nnodes 2 --node-rank 1 -- " + kProbe + " sum");
  EXPECT_NE(j.status, 0) << j.output;
  EXPECT_NE(j.output.find("[rank 2] hone: error: the torchrun environment says rank 2 of 4, but MPI's world has "
                          "this process as rank 0 of 2"),
            std::string::npos)
      << j.output;
}

TEST(Jobs, CommBenchPrintsTheNcclTestsTable) {
  // Sizes as nccl-tests' -b and -e take them: 256K is 262144 bytes.
  const Job j = run(kHone + " launch --nproc-per-node 2 -- hone comm-bench -b 256K --max-bytes 524288 "
                            "--iters 3 --warmup 1");
  ASSERT_EQ(j.status, 0) << j.output;
  EXPECT_NE(j.output.find("[rank 0] # hone comm-bench: 2 ranks, backend mpi, device cpu"), std::string::npos)
      << j.output;
  EXPECT_EQ(j.output.find("[rank 1]"), std::string::npos) << "only rank 0 prints\n" << j.output;
  std::istringstream lines(j.output);
  std::string line, op;
  std::map<std::string, int> rows;
  while (std::getline(lines, line)) {
    if (line.rfind("[rank 0] # ", 0) == 0) {
      const std::string title = line.substr(11);
      if (title == "all_reduce" || title == "all_gather" || title == "reduce_scatter") op = title;
      continue;
    }
    std::istringstream row(line.substr(line.find(']') + 1));
    double size, count, time, algbw, busbw;
    std::string type, redop;
    if (!(row >> size >> count >> type >> redop >> time >> algbw >> busbw)) continue;
    ++rows[op];
    EXPECT_EQ(type, "float");
    EXPECT_EQ(redop, op == "all_gather" ? "none" : "sum");
    EXPECT_EQ(size, count * 4) << line;
    EXPECT_NEAR(algbw, size / (time * 1e3), 0.006 + 0.01 * algbw) << line;
    // nccl-tests' bus bandwidth factors for 2 ranks: all_reduce 2(n-1)/n = 1, the others (n-1)/n = 1/2.
    EXPECT_NEAR(busbw, algbw * (op == "all_reduce" ? 1.0 : 0.5), 0.006) << line;
  }
  EXPECT_EQ(rows, (std::map<std::string, int>{{"all_gather", 2}, {"all_reduce", 2}, {"reduce_scatter", 2}}))
      << j.output;
  EXPECT_NE(j.output.find("[rank 0] # Avg bus bandwidth    : "), std::string::npos) << j.output;
}

TEST(Jobs, PlanPrintsItsFiguresAsJson) {
  const Job j = run(kHone + " plan llama3_1/8B_pretrain --world-size 512 --zero 3 --tokens 1e12 "
                            "gradient_accumulation_steps=1 enable_activation_checkpointing=true");
  ASSERT_EQ(j.status, 0) << j.output;
  std::string last = j.output.substr(0, j.output.size() - 1);
  last = last.substr(last.rfind('\n') + 1);
  const auto json = nlohmann::json::parse(last);
  PlanInput in;
  in.model = model_preset("llama3_1_8B");
  in.seq_len = 8192;
  in.dp = 512;
  in.zero = 3;
  in.activation_checkpointing = true;
  in.tokens = 1e12;
  in.hw = {.peak_flops = 989e12, .memory_bytes = 80e9, .intra_node_bw = 900e9, .inter_node_bw = 50e9,
           .devices_per_node = 8};
  const Plan p = plan_run(in);
  EXPECT_DOUBLE_EQ(json["total_bytes"].get<double>(), p.total);
  EXPECT_DOUBLE_EQ(json["step_s"].get<double>(), p.step_s);
  EXPECT_DOUBLE_EQ(json["train_s"].get<double>(), p.train_s);
  EXPECT_EQ(json["tokens_per_step"].get<double>(), 512 * 8192.0);
  EXPECT_TRUE(json["fits"].get<bool>());
  EXPECT_NE(j.output.find("memory per device"), std::string::npos);
  // Wrong layouts are one-line errors with status 2.
  const Job bad = run(kHone + " plan llama3_1/8B_pretrain --world-size 12 --tp 8");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("hone: error: --world-size 12 is not a multiple of --tp 8"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace hone::dist

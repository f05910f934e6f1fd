#pragma once
// SIGINT (Ctrl-C), SIGTERM (a scheduler's preemption, scancel) and SIGUSR1
// (Slurm's warning ahead of a job's time limit, sbatch --signal=USR1@N): a long
// command (a training run, convert, preprocess) asks for them with
// catch_stop_signals(), polls stop_requested() between two pieces of work and
// ends cleanly (a run saves, a writer removes what it half-wrote); a second
// signal ends the process at once.
//
// The signals are taken by a thread of their own, which waits for them; every
// other thread blocks them, so no signal handler ever runs on a thread that
// computes. One did: a handler run while oneDNN's JIT f32 GEMM had pointed its
// stack pointer into the heap wrote its frame there and corrupted the heap (an
// abort in free() a moment later, in about one stop of five; oneDNN before 3.12,
// uxlfoundation/oneDNN#4845, and Debian 12 ships 2.6).
#include <atomic>

namespace hone {

// Starts that thread. Call it first thing in main, before any other thread is
// started (threads take the blocked signals from the thread that starts them).
// Until catch_stop_signals(), a signal ends the process as it would have.
void take_stop_signals_on_their_own_thread();
// From now on the first SIGINT, SIGTERM or SIGUSR1 is a stop request.
void catch_stop_signals();
bool stop_requested();
const std::atomic<bool>& stop_requested_flag();
// The signal that asked for the stop (0: none).
int stop_signal();
// Thrown by a long command's progress callback once a stop is requested, to
// unwind (removing what is half-written) to where the command reports the stop.
struct Stopped {};

}  // namespace hone

#pragma once
// nanoGPT's training checkpoint (Karpathy's train.py writes out_dir/ckpt.pt):
// a torch.save archive of a dict
//
//   model          the GPT's state dict: transformer.wte.weight, transformer.wpe.weight,
//                  transformer.h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias},
//                  transformer.ln_f.{weight,bias}, lm_head.weight (tied to wte); every
//                  name under "_orig_mod." when the model was compiled
//   model_args     n_layer, n_head, n_embd, block_size, vocab_size, bias, dropout
//   optimizer, iter_num, best_val_loss, config
//
// The names are transformers' GPT-2 names, the matrices nn.Linear's [out, in]
// (not GPT-2's Conv1D [in, out]); the MLP's GELU is the exact one, LayerNorm's
// epsilon 1e-5; bias False (train.py's default) leaves out every bias, the
// norms' too. A model without flash attention also stores its causal masks
// (attn.bias), which are skipped. No tokenizer travels with it.
#include <memory>
#include <string>

#include "hone/io/weights.hpp"

namespace hone {

// Whether the torch.save archive at `path` is such a checkpoint (its dict has
// model_args and a model state dict).
bool is_nanogpt_checkpoint(const std::string& path);
// Opens it, checking model_args against every tensor before any is read.
std::unique_ptr<WeightSource> open_nanogpt(const std::string& path);

}  // namespace hone

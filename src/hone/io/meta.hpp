#pragma once
// Meta's own Llama checkpoint folders, as Meta's download tools write them and
// as the original/ folder of Meta's Hugging Face repositories holds them:
//
//   params.json          dim, n_layers, n_heads, n_kv_heads, vocab_size,
//                        multiple_of, ffn_dim_multiplier, norm_eps, rope_theta,
//                        use_scaled_rope (Llama 3.1 and later)
//   consolidated.00.pth  a torch.save state dict: tok_embeddings.weight,
//                        layers.N.attention.{wq,wk,wv,wo}.weight,
//                        layers.N.feed_forward.{w1,w2,w3}.weight (gate, down, up),
//                        layers.N.{attention_norm,ffn_norm}.weight, norm.weight,
//                        output.weight
//   tokenizer.model      tiktoken ranks (Llama 3) or SentencePiece (Llama 2)
//
// Query and key rows are in Meta's interleaved RoPE order and are permuted into
// hone's rotate-half order on reading. Sizes come from the tensors (Llama 2's
// params.json says vocab_size -1); params.json has no context length, so
// max_seq_len is Meta's for the generation (4096, 8192, or 131072 with scaled
// RoPE) unless the file gives max_seq_len. Model-parallel shards
// (consolidated.01.pth, ...) are refused.
#include <memory>
#include <string>

#include "hone/io/weights.hpp"

namespace hone {

// Whether `dir` is such a folder (it has params.json and consolidated.00.pth).
bool is_meta_folder(const std::string& dir);
// Opens it, checking params.json against every tensor before any is read.
std::unique_ptr<WeightSource> open_meta(const std::string& dir);

}  // namespace hone

#pragma once
// The checkpoint files of the two C trainers people already have:
//
// llm.c (Karpathy): a 256 × int32 header — magic 20240326, version (3: fp32
// weights, 5: bf16), max_seq_len, vocab_size, n_layers, n_heads, channels,
// padded_vocab_size — then GPT-2's weights back to back, each stacked over the
// layers: wte (padded vocab × C), wpe, ln1w, ln1b, qkvw (3C × C), qkvb, attprojw,
// attprojb, ln2w, ln2b, fcw (4C × C), fcb, fcprojw (C × 4C), fcprojb, lnfw, lnfb.
//
// llama2.c (Karpathy): fp32 Llama weights after a header of 7 int32 — dim,
// hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative: an unshared
// classifier follows), seq_len (the legacy format of stories15M.bin), or after a
// 256-byte header "ak42", version 1, the same 7 int32 and a shared-classifier
// byte. Query and key rows are in Meta's interleaved RoPE order, permuted into
// hone's (and Hugging Face's) rotate-half order on reading.
#include <memory>
#include <string>

#include "hone/io/weights.hpp"

namespace hone {

// "llmc" for a file with llm.c's magic number, else "llama2c" (with its "ak42"
// magic, or the legacy header that has none).
std::string c_checkpoint_format(const std::string& path);
// Opens an llm.c or llama2.c file, told apart by their magic numbers; anything
// else is an error naming the file and what was expected.
std::unique_ptr<WeightSource> open_c_checkpoint(const std::string& path);

}  // namespace hone

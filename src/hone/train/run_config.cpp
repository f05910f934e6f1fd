#include "hone/train/run_config.hpp"

#include <filesystem>
#include <numeric>

#include "hone/core/allocator.hpp"
#include "hone/core/error.hpp"
#include "hone/core/text.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/dist/plan.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/model/activations.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

namespace fs = std::filesystem;

Schema run_schema() {
  Schema s;
  s.add({"recipe", ValueType::string, nullptr, "the recipe this config is for"});
  s.add({"output_dir", ValueType::string, nullptr, "the run directory (checkpoints, metrics, logs)", {}, true});
  s.add({"seed", ValueType::integer, 1234, "seed of weight init and data order"});
  s.add({"device", ValueType::string, "cpu", "cpu, cuda or cuda:N"});
  s.add({"dtype", ValueType::string, "fp32", "compute precision", {"fp32", "bf16"}});
  s.add({"threads", ValueType::integer, 0, "CPU threads (0: all cores)"}, Range{.low = 0, .high = 4096});
  return s;
}

Schema model_source_schema(const std::string& what, bool required) {
  Schema s;
  s.add({"checkpoint.path", ValueType::string, nullptr,
         what + ": a Hugging Face folder, a Meta Llama folder (params.json), a hone model or checkpoint folder, a "
                "run directory, an llm.c / llama2.c file, or a nanoGPT ckpt.pt",
         {}, required});
  s.add({"checkpoint.format", ValueType::string, "auto",
         "the format checkpoint.path must have (auto: any, told apart by its files)",
         {"auto", "hf", "meta", "hone", "llmc", "llama2c", "nanogpt"}});
  return s;
}

void check_path_exists(const Config& c, std::string_view key, const std::string& path) {
  std::error_code error;
  if (fs::exists(path, error)) return;
  const fs::path working = fs::current_path(error);
  fail("{}: {} {}: no such file or folder{}", c.origin_of(key), key, path,
       fs::path(path).is_relative() && !error
           ? fmt::format(" (a relative path is read from the working directory, {})", working.string())
           : std::string());
}

std::string tokenizer_path_for_model(const Config& c) {
  if (c.has("tokenizer.path")) {
    check_path_exists(c, "tokenizer.path", c.get<std::string>("tokenizer.path"));
    return c.get<std::string>("tokenizer.path");
  }
  const std::string model = c.get<std::string>("checkpoint.path");
  HONE_CHECK(fs::is_directory(model), "{}: set tokenizer.path (the model {} is a file, not a folder with a tokenizer)",
             c.origin(), model);
  const std::string folder = model_folder_of(model);
  if (is_lora_checkpoint(folder)) {  // a LoRA run's: the run's tokenizer, or its base model's
    const TrainedLora trained = read_trained_lora(folder);
    if (trained.tokenizer) return *trained.tokenizer;
    Config base = c;
    base.set("checkpoint.path", trained.base);
    return tokenizer_path_for_model(base);
  }
  HONE_CHECK(!tokenizer_files_in(folder).empty(),
             "{}: set tokenizer.path: {} holds no tokenizer files (a run pretrained without tokenizer.path carries "
             "none)",
             c.origin(), folder);
  return folder;
}

Schema model_schema() {
  Schema s;
  s.add({"model.name", ValueType::string, nullptr, "a built-in model (hone ls); the keys below override its fields",
         model_preset_names()});
  s.add({"model.family", ValueType::string, nullptr, "architecture family", {"llama", "gpt2", "mpt"}});
  const std::pair<const char*, const char*> shape[] = {
      {"vocab_size", "tokens in the vocabulary"},
      {"dim", "hidden size"},
      {"n_layers", "transformer blocks"},
      {"n_heads", "attention heads"},
      {"n_kv_heads", "key/value heads (fewer than n_heads: GQA; unset, a model with one a head, GPT-2's, keeps one a "
                     "head as model.n_heads changes)"},
      {"ffn_dim", "MLP hidden size"},
      {"max_seq_len", "longest sequence (positions)"}};
  for (const auto& [key, help] : shape) {
    s.add({std::string("model.") + key, ValueType::integer, nullptr, help}, Range::positive());
  }
  s.add({"model.norm", ValueType::string, nullptr, "normalization", {"rmsnorm", "layernorm"}});
  s.add({"model.norm_bias", ValueType::boolean, nullptr, "LayerNorm with a bias"});
  s.add({"model.norm_eps", ValueType::number, nullptr, "normalization epsilon"}, Range::positive());
  s.add({"model.position", ValueType::string, nullptr, "position encoding", {"rope", "learned", "alibi"}});
  s.add({"model.rope_theta", ValueType::number, nullptr, "RoPE base"}, Range::positive());
  s.add({"model.rope_scaling.factor", ValueType::number, nullptr, "Llama 3.1 RoPE scaling factor (1: none)"});
  s.add({"model.rope_scaling.low_freq_factor", ValueType::number, nullptr, "Llama 3.1 RoPE scaling"});
  s.add({"model.rope_scaling.high_freq_factor", ValueType::number, nullptr, "Llama 3.1 RoPE scaling"});
  s.add({"model.rope_scaling.original_max_position", ValueType::integer, nullptr, "Llama 3.1 RoPE scaling"});
  s.add({"model.alibi_bias_max", ValueType::number, nullptr, "ALiBi slope range"});
  s.add({"model.mlp", ValueType::string, nullptr, "MLP activation", {"swiglu", "gelu", "gelu_tanh"}});
  s.add({"model.linear_bias", ValueType::boolean, nullptr, "biases on attention and MLP projections"});
  s.add({"model.tie_embeddings", ValueType::boolean, nullptr, "output projection shares the token embedding"});
  s.add({"model.init_std", ValueType::number, nullptr, "standard deviation of weight init"}, Range::positive());
  // LLM Foundry's MPT keys (docs/migrating.md).
  s.add_foreign("model.d_model", "LLM Foundry's; hone's is model.dim");
  s.add_foreign("model.expansion_ratio", "LLM Foundry's; hone's is model.ffn_dim (expansion_ratio x dim)");
  s.add_foreign("model.attn_config", "LLM Foundry's; hone's MPT takes model.position: alibi and model.alibi_bias_max "
                                    "(attn_uses_sequence_id: dataset.block_causal)");
  s.add_foreign("model.no_bias", "LLM Foundry's; hone's is model.linear_bias (no_bias: true is linear_bias: false)");
  s.add_foreign("model.init_device", "LLM Foundry's; hone builds the model where device says");
  s.add_foreign("model.learned_pos_emb", "LLM Foundry's; hone's MPT takes model.position: alibi (no learned positions)");
  s.add_foreign("model.resid_pdrop", "LLM Foundry's; hone trains without dropout (LoRA's model.lora_dropout aside)");
  s.add_foreign("model.emb_pdrop", "LLM Foundry's; hone trains without dropout (LoRA's model.lora_dropout aside)");
  s.add_foreign("model.init_config", "LLM Foundry's; hone's is model.init_std");
  s.add_foreign_value("model.name", "mpt_causal_lm",
                      "LLM Foundry's MPT class; hone's is model.family: mpt with the shape keys (or a built-in "
                      "model.name such as mpt_125M)");
  s.add_foreign_value("model.name", "hf_causal_lm",
                      "LLM Foundry's Hugging Face class; hone's model to start from is checkpoint.path (a local "
                      "folder)");
  s.add_foreign("model.pretrained_model_name_or_path", "LLM Foundry's; hone's model to start from is checkpoint.path "
                                                       "(a local folder)");
  s.add_foreign("model.pretrained", "LLM Foundry's; hone always loads checkpoint.path's weights");
  return s;
}

Schema training_schema() {
  Schema s;
  // Bounded so that the products they enter (rows x seq_len x dim) stay far from overflowing.
  constexpr Range kCount{.low = 1, .high = double(1 << 20)};
  s.add({"batch_size", ValueType::integer, 8, "sequences per device per micro-batch"}, kCount);
  s.add({"gradient_accumulation_steps", ValueType::integer, 1, "micro-batches per optimizer step"}, kCount);
  s.add({"max_steps", ValueType::integer, nullptr, "optimizer steps (or give epochs or max_tokens)"},
        Range::positive());
  s.add({"epochs", ValueType::number, nullptr, "passes over the training data"}, Range::positive());
  s.add({"max_tokens", ValueType::integer, nullptr, "a token budget"}, Range::positive());
  s.add({"optimizer.lr", ValueType::number, 3e-4, "peak learning rate"}, Range::not_negative());
  s.add({"optimizer.betas", ValueType::number_list, Json::array({0.9, 0.95}), "AdamW betas"}, Range::fraction());
  s.add({"optimizer.eps", ValueType::number, 1e-8, "AdamW epsilon"}, Range::positive());
  s.add({"optimizer.weight_decay", ValueType::number, 0.1, "decoupled weight decay (matrices and embeddings)"},
        Range::not_negative());
  s.add({"optimizer.max_grad_norm", ValueType::number, 1.0, "global gradient-norm clip (0: off)"},
        Range::not_negative());
  s.add({"lr_scheduler.name", ValueType::string, "cosine", "schedule after warmup",
         {"constant", "linear", "cosine", "wsd"}});
  s.add({"lr_scheduler.warmup_steps", ValueType::integer, 0,
         "linear warmup steps: step k of them takes optimizer.lr * k / warmup_steps"},
        Range::not_negative());
  s.add({"lr_scheduler.min_lr_ratio", ValueType::number, 0.1,
         "final learning rate / peak (Llama's 10%; torchtune, torchtitan and Megatron decay to 0 by default)"},
        Range::unit_interval());
  s.add({"lr_scheduler.decay_fraction", ValueType::number, 0.1,
         "wsd: the last fraction of all the steps, decaying towards min_lr, which the step after the last would take "
         "(torchtitan's decay_ratio; at most the steps after the warmup)"},
        Range::positive_fraction());
  s.add({"checkpoint.every_n_steps", ValueType::integer, 0, "save every N steps (0: only at the end)"},
        Range::not_negative());
  s.add({"checkpoint.keep_last_n", ValueType::integer, 3, "checkpoints kept (0: all)"}, Range::not_negative());
  s.add({"checkpoint.save_final", ValueType::boolean, true,
         "save when the run ends (a ZeRO-3 or tensor-parallel run that exports always does: it exports from there)"});
  s.add({"resume", ValueType::string, nullptr, "latest (if the run has a checkpoint) or a checkpoint folder"});
  s.add({"log_every_n_steps", ValueType::integer, 10, "metrics every N steps"}, Range::positive());
  s.add({"eval.every_n_steps", ValueType::integer, 0, "validation every N steps (0: only at the end)"},
        Range::not_negative());
  s.add({"eval.max_batches", ValueType::integer, 20,
         "validation batches per evaluation at most, each of a step's samples (batch_size x "
         "gradient_accumulation_steps x ranks; Megatron's --eval-iters) (0: all of the validation data, each sample "
         "once, Composer's eval_subset_num_batches -1)"},
        Range::not_negative());
  s.add({"eval.first", ValueType::boolean, false, "also validate before the first step"});
  s.add({"enable_activation_checkpointing", ValueType::boolean, false, "recompute each layer in backward"});
  s.add({"enable_activation_offloading", ValueType::boolean, false,
         "with activation checkpointing on a GPU: keep the layer inputs in host memory"});
  s.add({"mfu_peak_tflops", ValueType::number, nullptr,
         "throughput/mfu against this peak, e.g. a GPU's datasheet bf16 TFLOP/s (PaLM's convention; H100 SXM: 989); "
         "default: the matrix-product peak measured as the run starts"},
        Range::positive());
  s.add({"max_consecutive_nonfinite", ValueType::integer, 3,
         "stop after this many steps in a row with a non-finite loss or gradient (each is skipped; 0: never)"},
      Range::not_negative());
  s.add({"logging.tensorboard", ValueType::boolean, true, "write TensorBoard event files"});
  s.add({"distributed.zero", ValueType::integer, 0,
         "ZeRO stage over data-parallel ranks: 0 (replicas), 1 (optimizer state sharded), 2 (and gradients), "
         "3 (and weights, gathered a layer at a time)"}, Range{.low = 0, .high = 3});
  s.add({"distributed.bucket_mb", ValueType::number, 25.0,
         "ZeRO stages 0 and 1: gradients reduced over ranks in buckets of this many MiB while backward runs (0: all "
         "at once after it)"}, Range::not_negative());
  s.add({"distributed.tp", ValueType::integer, 1,
         "tensor-parallel ranks per model replica (Megatron's split with sequence parallelism; divides the world "
         "size)"}, Range::positive());
  // LLM Foundry's (Composer's) run keys, as docs/migrating.md maps them.
  const std::pair<const char*, const char*> foundry[] = {
      {"max_duration", "max_steps (4800ba), epochs (1ep) or max_tokens (2000000tok)"},
      {"eval_interval", "eval.every_n_steps (in steps; Composer reads a bare integer as epochs)"},
      {"eval_subset_num_batches", "eval.max_batches (0: all)"},
      {"global_train_batch_size", "batch_size x gradient_accumulation_steps x data-parallel ranks"},
      {"device_train_microbatch_size", "batch_size (per device)"},
      {"device_eval_batch_size", "batch_size, which validation takes too"},
      {"precision", "dtype (amp_bf16: dtype: bf16)"},
      {"save_interval", "checkpoint.every_n_steps (in steps; Composer reads a bare integer as epochs)"},
      {"save_folder", "output_dir"},
      {"save_num_checkpoints_to_keep", "checkpoint.keep_last_n"},
      {"autoresume", "resume: latest"},
      {"global_seed", "seed"},
      {"run_name", "output_dir (a run is named by its folder)"},
      {"train_loader", "dataset.* (pretraining's MDS folder: dataset.type: mds, dataset.path: LOCAL/train; "
                       "fine-tuning's records: dataset.path, with dataset.template: plain for prompt/response)"},
      {"load_path", "checkpoint.path (a model to start from) or resume (a run to go on with)"},
      {"eval_loader", "dataset.validation_path (LOCAL/val)"},
      {"scheduler", "lr_scheduler (name, warmup_steps; alpha_f as min_lr_ratio)"},
      {"max_seq_len", "dataset.seq_len (pretraining) or dataset.max_seq_len (fine-tuning)"},
      {"tokenizer.name", "tokenizer.path (a local folder)"},
      {"tokenizer.kwargs", "tokenizer.path's own files (tokenizer_config.json)"},
      {"algorithms", "optimizer.max_grad_norm for gradient_clipping; no other algorithms"},
      {"fsdp_config", "distributed.zero (FULL_SHARD: 3, SHARD_GRAD_OP: 2), enable_activation_checkpointing"},
      {"loggers", "metrics.jsonl and TensorBoard files in output_dir"},
      {"callbacks", "the throughput/* and memory/* metrics"},
      {"progress_bar", "the progress line (on a terminal)"},
      {"log_to_console", "the progress line (on a terminal)"},
      {"console_log_interval", "log_every_n_steps"},
      {"dist_timeout", "HONE_DIST_TIMEOUT (seconds, in the environment)"}};
  for (const auto& [key, instead] : foundry) s.add_foreign(key, fmt::format("LLM Foundry's; hone's is {}", instead));
  s.add_foreign("optimizer.name", "LLM Foundry's; hone's optimizer is AdamW (decoupled_adamw's weight_decay divided "
                                  "by lr is optimizer.weight_decay)");
  // torchtune's recipe keys, which a config brought over may still hold.
  s.add_foreign("clip_grad_norm", "torchtune's; hone's is optimizer.max_grad_norm (1.0 by default, 0: no clipping)");
  s.add_foreign("max_steps_per_epoch", "torchtune's; hone's max_steps counts the whole run (give epochs=null with it)");
  s.add_foreign("resume_from_checkpoint", "torchtune's; hone resumes with resume=latest (or resume=STEP_FOLDER)");
  s.add_foreign("shuffle", "torchtune's; hone's is dataset.shuffle");
  s.add_foreign("checkpointer", "torchtune's; hone's model to start from is checkpoint.path (the folder: its files and "
                                "architecture are read from it), and a run writes its checkpoints into output_dir");
  s.add_foreign("save_adapter_weights_only", "torchtune's; a LoRA run's checkpoints hold its adapters alone, and "
                                             "export.peft and export.hf write the exports");
  for (const char* key : {"lora_rank", "lora_alpha", "lora_dropout", "lora_attn_modules", "apply_lora_to_mlp",
                          "apply_lora_to_output", "use_dora"}) {
    s.add_foreign(key, fmt::format("torchtune's model.{} is hone's too", key));
  }
  s.add_foreign("model.quantize_base", "torchtune's QLoRA (a 4-bit NF4 base); hone's LoRA keeps the base in dtype "
                                       "(bf16 halves fp32's memory), and has no quantized base yet");
  s.add_foreign("profiler", "torchtune's; HONE_PROFILE=1 hone run ... lists each op's time at the end");
  s.add_foreign("compile", "torchtune's torch.compile; hone runs its own kernels, with nothing to compile");
  s.add_foreign("log_peak_memory_stats", "torchtune's; hone logs the memory/* metrics at every logged step");
  s.add_foreign("metric_logger", "torchtune's; hone writes metrics.jsonl and TensorBoard files (logging.tensorboard) "
                                 "into output_dir");
  s.add_foreign("optimizer.fused", "torch.optim's; hone's AdamW updates every parameter in one pass already");
  s.add_foreign("optimizer_in_bwd", "torchtune's; hone steps the optimizer after the backward");
  return s;
}

Schema pretrain_dataset_schema() {
  Schema s;
  s.add({"dataset.type", ValueType::string, "mock", "where tokens come from", {"mock", "megatron", "mds", "tokens"}});
  s.add({"dataset.path", ValueType::string, nullptr,
         "megatron: a prefix or a blend 'W1 PREFIX1 W2 PREFIX2 ...' ('PREFIX1 PREFIX2': by size); mds: a folder with "
         "index.json; tokens: a token file (nanoGPT's train.bin, an llm.c shard), several, or a glob of them"});
  s.add({"dataset.seq_len", ValueType::integer, nullptr, "tokens per training sequence", {}, true}, Range::positive());
  s.add({"dataset.validation_path", ValueType::string, nullptr,
         "validation data of the same type as dataset.path (a prefix or a blend; an MDS folder; nanoGPT's val.bin), "
         "instead of documents held out of dataset.path"});
  s.add({"dataset.validation_fraction", ValueType::number, kPretrainingValidationFraction,
         "documents of each source held out for validation (without dataset.validation_path)"},
        Range::fraction());
  s.add({"dataset.shuffle", ValueType::boolean, true, "shuffle the documents and the samples cut from them every epoch"});
  s.add({"dataset.mock.documents", ValueType::integer, 2000, "mock: documents"}, Range::positive());
  s.add({"dataset.mock.document_length", ValueType::integer, 512, "mock: tokens per document"}, Range::positive());
  s.add({"tokenizer.path", ValueType::string, nullptr,
         "the tokenizer the data was made with (a folder or a tokenizer file): its files go into every checkpoint"});
  return s.add(document_boundaries_schema()).add(mds_tokens_schema());
}

Schema document_boundaries_schema() {
  Schema s;
  s.add({"dataset.block_causal", ValueType::boolean, false,
         "each document of a sample a sequence of its own: positions from 0 at its first token, attention within it "
         "(Megatron's --reset-position-ids --reset-attention-mask; false: samples run across documents)"});
  s.add({"dataset.eod_mask_loss", ValueType::boolean, false,
         "no loss where the input is a document's last token (its EOD): no document's first token predicted from "
         "another (Megatron's --eod-mask-loss)"});
  s.add({"dataset.eod_id", ValueType::integer, nullptr,
         "tokens: the id between documents, each ending with it (50256, GPT-2's <|endoftext|>, in nanoGPT's and "
         "llm.c's GPT-2 data); unset: a file is one document"},
        Range::not_negative());
  return s;
}

Schema mds_tokens_schema() {
  Schema s;
  s.add({"dataset.token_encoding_type", ValueType::string, std::string(data::kDefaultBytesTokenType),
         "mds: the integers of token columns stored as raw bytes (LLM Foundry's concat_tokens datasets and "
         "pre-tokenized input_ids/labels before ndarray columns: int64); ndarray columns carry their own",
         {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}});
  return s;
}

RunSettings run_settings_from(const Config& c) {
  RunSettings r;
  r.output_dir = c.get<std::string>("output_dir");
  r.seed = uint64_t(c.get<int64_t>("seed"));
  r.device = parse_device(c.get<std::string>("device"));
  r.dtype = parse_dtype(c.get<std::string>("dtype"));
  r.threads = int(c.get<int64_t>("threads"));
  return r;
}

ActivationOptions activation_options_from(const Config& c) {
  const ActivationOptions options{.checkpointing = c.get<bool>("enable_activation_checkpointing"),
                                  .offload_inputs = c.get<bool>("enable_activation_offloading"),
                                  .tp = int(c.get<int64_t>("distributed.tp"))};
  HONE_CHECK(!options.offload_inputs || (options.checkpointing && run_settings_from(c).device.is_cuda()),
             "{}: enable_activation_offloading keeps the checkpointed layer inputs in host memory during a GPU run: it "
             "needs enable_activation_checkpointing: true and device: cuda",
             c.origin());
  return options;
}

int64_t sequence_length_for(const Config& c, std::string_view key, int64_t fallback, const ModelConfig& model) {
  if (!c.has(key)) return std::min(fallback, model.max_seq_len);
  const int64_t length = c.get<int64_t>(key);
  HONE_CHECK(length <= model.max_seq_len, "{}: {} {} exceeds the model's max_seq_len {}", c.origin_of(key), key, length,
             model.max_seq_len);
  return length;
}

int64_t sample_length_multiple(const Config& c, Device device) {
  const int64_t multiple =
      c.has("dataset.pad_to_multiple_of") ? c.get<int64_t>("dataset.pad_to_multiple_of") : device.is_cuda() ? 128 : 64;
  const int64_t tp = c.has("distributed.tp") ? c.get<int64_t>("distributed.tp") : 1;
  return multiple == 0 ? 0 : std::lcm(multiple, tp);
}

ModelConfig model_config_from(const Config& c) {
  ModelConfig m;
  if (c.has("model.name")) {
    m = model_preset(c.get<std::string>("model.name"));
  } else {
    HONE_CHECK(c.has("model.family"), "{}: give model.name (a built-in model) or model.family and its shape",
               c.origin());
    const std::string family = c.get<std::string>("model.family");
    m = model_preset(family + "_tiny");  // the family's defaults; the shape comes from the keys below
    m.name = "custom_" + family;
  }
  return with_model_keys(c, std::move(m), /*name_changes=*/c.has("model.name"));
}

ModelConfig with_model_keys(const Config& c, ModelConfig m, bool name_changes) {
  // A built-in model the config changes is named with the changes, so that a
  // banner or a benchmark does not call the quickstart's 15.8M model llama_tiny.
  std::vector<std::string> changes;
  auto changed = [&](std::string_view key, const auto& value) {
    changes.push_back(fmt::format("{} {}", key.substr(std::string_view("model.").size()), value));
  };
  auto take = [&]<typename T>(const char* key, T& field) {
    if (!c.has(key) || c.get<T>(key) == field) return;
    field = c.get<T>(key);
    changed(key, field);
  };
  auto choice = [&](const char* key, auto& field, auto parse) {
    if (!c.has(key) || parse(c.get<std::string>(key)) == field) return;
    field = parse(c.get<std::string>(key));
    changed(key, c.get<std::string>(key));
  };
  auto integer = [&](const char* key, int64_t& field) { take(key, field); };
  auto number = [&](const char* key, double& field) { take(key, field); };
  auto boolean = [&](const char* key, bool& field) { take(key, field); };
  integer("model.vocab_size", m.vocab_size);
  integer("model.dim", m.dim);
  integer("model.n_layers", m.n_layers);
  // Multi-head attention (GPT-2's, MPT's) stays so as model.n_heads changes (nanoGPT's n_head).
  const bool multi_head = m.n_kv_heads == m.n_heads;
  integer("model.n_heads", m.n_heads);
  if (multi_head && !c.has("model.n_kv_heads")) m.n_kv_heads = m.n_heads;
  integer("model.n_kv_heads", m.n_kv_heads);
  integer("model.ffn_dim", m.ffn_dim);
  integer("model.max_seq_len", m.max_seq_len);
  choice("model.norm", m.norm, [](const std::string& n) { return n == "rmsnorm" ? NormKind::rmsnorm : NormKind::layernorm; });
  boolean("model.norm_bias", m.norm_bias);
  number("model.norm_eps", m.norm_eps);
  choice("model.position", m.position, [](const std::string& p) {
    return p == "rope" ? PositionKind::rope : p == "learned" ? PositionKind::learned : PositionKind::alibi;
  });
  number("model.rope_theta", m.rope_theta);
  number("model.rope_scaling.factor", m.rope_scaling.factor);
  number("model.rope_scaling.low_freq_factor", m.rope_scaling.low_freq_factor);
  number("model.rope_scaling.high_freq_factor", m.rope_scaling.high_freq_factor);
  integer("model.rope_scaling.original_max_position", m.rope_scaling.original_max_position);
  number("model.alibi_bias_max", m.alibi_bias_max);
  choice("model.mlp", m.mlp, [](const std::string& a) {
    return a == "swiglu" ? MlpKind::swiglu : a == "gelu" ? MlpKind::gelu : MlpKind::gelu_tanh;
  });
  boolean("model.linear_bias", m.linear_bias);
  boolean("model.tie_embeddings", m.tie_embeddings);
  number("model.init_std", m.init_std);
  choice("model.family", m.family, [](const std::string& f) {
    return f == "llama" ? Family::llama : f == "gpt2" ? Family::gpt2 : Family::mpt;
  });
  try {
    m.validate();
  } catch (const Error& e) {
    fail("{}: {}", c.origin_of_section("model"), e.what());
  }
  if (name_changes && !changes.empty()) {
    // A loaded model's name may say what changed it before.
    m.name += fmt::format("{}{}", m.name.find(" with ") == std::string::npos ? " with " : ", ", fmt::join(changes, ", "));
  }
  return m;
}

AdamWConfig adamw_config_from(const Config& c) {
  const auto betas = c.get<std::vector<double>>("optimizer.betas");
  HONE_CHECK(betas.size() == 2, "{}: optimizer.betas must hold two numbers, got {}",
             c.origin_of("optimizer.betas"), betas.size());
  return {.lr = c.get<double>("optimizer.lr"),
          .beta1 = betas[0],
          .beta2 = betas[1],
          .eps = c.get<double>("optimizer.eps"),
          .weight_decay = c.get<double>("optimizer.weight_decay")};
}

LrSchedule lr_schedule_from(const Config& c, int64_t total_steps) {
  LrSchedule s;
  s.kind = parse_lr_schedule(c.get<std::string>("lr_scheduler.name"));
  s.peak_lr = c.get<double>("optimizer.lr");
  s.min_lr = s.peak_lr * c.get<double>("lr_scheduler.min_lr_ratio");
  s.warmup_steps = c.get<int64_t>("lr_scheduler.warmup_steps");
  s.total_steps = total_steps;
  s.decay_fraction = c.get<double>("lr_scheduler.decay_fraction");
  return s;
}

MemoryEstimate estimate_training_memory(const ModelConfig& model, DType dtype, int64_t batch_size, int64_t seq_len,
                                        const ActivationOptions& activations, const std::optional<LoraConfig>& lora,
                                        int zero, int ranks, Device device) {
  const int tp = activations.tp;
  const size_t n = size_t(model.num_params_per_rank(tp));
  const size_t trained = lora ? size_t(lora_parameter_count(model, *lora, tp)) : n;
  const size_t r = size_t(ranks > 1 ? ranks : 1);
  MemoryEstimate m;
  m.zero = ranks > 1 ? zero : 0;
  m.ranks = int(r);
  m.tp = tp;
  // LoRA's frozen base is kept in the compute dtype alone (Transformer).
  m.parameters = lora ? dtype_size(dtype) * n + 4 * trained : 4 * n;
  m.gradients = 4 * trained;
  m.optimizer = 8 * trained / (m.zero >= 1 ? r : 1);
  m.compute_copy = dtype == DType::bf16 ? 2 * trained : 0;
  if (m.zero == 2) {  // the shard, and the buffers of the units backward is at (LoRA: adapters, small)
    m.gradients = 4 * trained / r + (lora ? 3 * 4 * trained / size_t(model.n_layers)
                                          : size_t(dist::zero2_unit_gradient_bytes(model, tp)));
  }
  if (m.zero == 3) {
    m.parameters /= r;
    m.gradients /= r;
    m.compute_copy = 0;  // gathered units hold their casts
    m.gathered = size_t(dist::zero3_gathered_bytes(model, dtype));
  }
  ActivationOptions planned = activations;
  planned.head_weight_gradient = !lora;  // as the Transformer plans it
  planned.padded_logit_rows = pads_logit_rows(device);
  m.activations = activation_bytes(model, dtype, batch_size, seq_len, planned, device);
  if (lora) m.activations += lora_activation_bytes(model, *lora, dtype, batch_size, seq_len, planned);
  const ops::AttentionHeads heads{
      .n_heads = model.n_heads / tp, .n_kv_heads = model.n_kv_heads / tp, .head_dim = model.head_dim()};
  m.workspace =
      ops::gemm_workspace_bytes(device) + ops::attention_scratch_bytes(device, dtype, heads, batch_size, seq_len);
  return m;
}

size_t reference_model_bytes(const ModelConfig& model, DType dtype, int64_t batch_size, int64_t seq_len,
                             Device device) {
  return dtype_size(dtype) * size_t(model.num_params()) +
         activation_bytes(model, dtype, batch_size, seq_len, {.checkpointing = true}, device);
}

namespace {

// "more than this machine's 23.5 GiB of memory: ...", where the estimate is.
std::optional<std::string> beyond_host_memory(const MemoryEstimate& m, const RunSettings& run) {
  const size_t host = host_memory_bytes();
  if (run.device.is_cuda() || host == 0 || m.total() <= host) return std::nullopt;
  const bool activations_would_fit = m.total() - m.activations <= host;
  return fmt::format("more than this machine's {} of memory: it will not fit (try {})", format_bytes(double(host)),
                     activations_would_fit ? "enable_activation_checkpointing=true or a smaller batch_size"
                                           : "a smaller model, or its state sharded over more machines: hone plan");
}

}  // namespace

void check_fits_host_memory(const MemoryEstimate& m, const RunSettings& run, const Config& c) {
  if (const std::optional<std::string> beyond = beyond_host_memory(m, run)) {
    fail("{}: the run needs about {} of memory (hone validate shows its parts), {}", c.origin(),
         format_bytes(double(m.total())), *beyond);
  }
}

std::string describe(const MemoryEstimate& m, const RunSettings& run) {
  const std::string tensor_parallel = m.tp > 1 ? fmt::format(" data-parallel x {} tensor-parallel", m.tp) : "";
  const std::string per_rank = m.ranks * m.tp > 1 ? fmt::format(", per rank of {}{} at ZeRO stage {}", m.ranks,
                                                                 tensor_parallel, m.zero)
                                                   : "";
  const std::string gathered = m.gathered > 0 ? " + gathered units " + format_bytes(double(m.gathered)) : "";
  const std::string workspace = m.workspace > 0 ? " + workspace " + format_bytes(double(m.workspace)) : "";
  const std::string reference = m.reference > 0 ? " + reference model " + format_bytes(double(m.reference)) : "";
  const std::optional<std::string> beyond = beyond_host_memory(m, run);
  const std::string too_big = beyond ? " -- " + *beyond : "";
  return fmt::format("memory estimate on {} ({}{}): {} = weights {} + gradients {} + AdamW {} + bf16 copy {}{} + "
                     "activations {}{}{}{}",
                     run.device.str(), dtype_name(run.dtype), per_rank, format_bytes(double(m.total())),
                     format_bytes(double(m.parameters)), format_bytes(double(m.gradients)),
                     format_bytes(double(m.optimizer)), format_bytes(double(m.compute_copy)), gathered,
                     format_bytes(double(m.activations)), workspace, reference, too_big);
}

std::string describe_batch(int64_t batch_size, int64_t seq_len, int64_t gradient_accumulation_steps) {
  return fmt::format("{} x {} tokens per micro-batch, {} {} per step", batch_size, seq_len, gradient_accumulation_steps,
                     plural(gradient_accumulation_steps, "micro-batch", "micro-batches"));
}

}  // namespace hone

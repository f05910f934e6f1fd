#pragma once
// The decoder-only Transformer of every supported family, with an explicit
// forward and backward pass per layer (no autograd tape): activations live in an
// arena planned from the config before the first step.
#include <array>
#include <functional>
#include <optional>
#include <span>

#include "hone/dist/communicator.hpp"
#include "hone/model/activations.hpp"
#include "hone/model/config.hpp"
#include "hone/model/lora.hpp"
#include "hone/model/parameters.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

// Hone's parameter names. Hugging Face names map onto these in io/.
struct LayerParameters {
  Parameter* attn_norm_weight = nullptr;
  Parameter* attn_norm_bias = nullptr;  // LayerNorm with bias only
  Parameter* qkv_weight = nullptr;      // [(H + 2·KV)·hd, D]: query, key, value heads
  Parameter* qkv_bias = nullptr;        // linear_bias only, likewise below
  Parameter* out_weight = nullptr;      // [D, H·hd]
  Parameter* out_bias = nullptr;
  Parameter* mlp_norm_weight = nullptr;
  Parameter* mlp_norm_bias = nullptr;
  Parameter* up_weight = nullptr;  // [mlp_up_dim, D]: rows [0, F) gate, [F, 2F) up for SwiGLU
  Parameter* up_bias = nullptr;
  Parameter* down_weight = nullptr;  // [D, F]
  Parameter* down_bias = nullptr;
};

// A LoRA adapter on rows [row_begin, row_begin + rows) of a projection weight
// (a column block of its output): q, k and v are row blocks of the fused qkv.
// Under tensor parallelism an adapter is split with its base weight: B by rows
// where the base is split by rows (row_begin and rows then count this rank's
// rows), A by columns where the base is split by columns. The forward and
// backward code is the same: each rank's products are its part of the sum.
struct LoraAdapter {
  std::string module;  // torchtune's name: q_proj, ..., output
  Parameter* base = nullptr;  // the weight it adapts
  Parameter* a = nullptr;  // [rank, in]
  Parameter* b = nullptr;  // [rows, rank]
  int64_t row_begin = 0, rows = 0;  // in this rank's part of the base weight
  uint64_t stream = 0;  // dropout masks: this adapter's number (and its rank's) in their Philox streams
  Tensor u;             // x·Aᵀ of the last forward pass [batch·seq, rank]
  // DoRA (lora.hpp): the magnitudes [rows], null for plain LoRA; from the last
  // forward pass m/‖W + s·B·A‖ and 1/‖W + s·B·A‖ per row, and the block's
  // output before that rescaling (its first row in the whole: chunks of rows).
  Parameter* magnitude = nullptr;
  Tensor scale, inv_norm, z;
  int64_t z_first_row = -1;
};

// How one model is spread over ranks (dist/ and train/training_world.hpp).
struct ModelPlacement {
  // Pads the flat buffers of the trained parameters (ZeRO-1/2 cut them into
  // that many equal shards).
  int64_t pad_multiple = 1;
  // ZeRO-3: stores only this rank's chunks of every set: the weights are
  // readable once a residency (set_residency) gathers them, and init_weights()
  // and loading write the chunks.
  ShardSpec shard;
  // Tensor parallelism over this group (null or one rank: none), Megatron's
  // split with sequence parallelism: each rank holds heads/tp of every
  // attention and ffn/tp of every MLP (qkv and up split by rows, out and down
  // by columns), and B·T/tp rows of the residual stream, which are gathered
  // from all ranks before qkv and up and reduce-scattered after out and down.
  // Norms, embeddings and the output head are held whole by every rank and
  // computed on its rows: their gradients are partial sums over the group
  // (dist::DataParallel completes them), as are the row-parallel biases (rank
  // 0 adds them).
  dist::Communicator* tensor_parallel = nullptr;
};

// Whether a model's base weights train. Frozen ones (inference, DPO's
// reference model; LoRA's base always) are kept in the compute dtype alone,
// with no gradients: in bf16 2 bytes a parameter instead of 10 (fp32 master,
// bf16 copy, fp32 gradient).
enum class BaseWeights { trainable, frozen };

class Transformer {
 public:
  // dtype is the activation and GEMM dtype: fp32, bf16 (mixed precision: fp32
  // master weights, bf16 compute copy) or fp64 (gradient checks). With `lora`
  // the base weights are frozen (no gradients, no optimizer state) and only the
  // adapters train; a frozen model without adapters trains nothing (backward()
  // is refused).
  explicit Transformer(ModelConfig config, DType dtype = DType::f32, Device device = Device::cpu(),
                       std::optional<LoraConfig> lora = std::nullopt, ModelPlacement placement = {},
                       BaseWeights base = BaseWeights::trainable);

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // The base weights.
  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }
  // What training updates: the LoRA adapters when there are any, else the base
  // (a frozen model: an empty set).
  ParameterSet& trainable_params() { return base_frozen_ ? lora_params_ : params_; }
  const ParameterSet& trainable_params() const { return base_frozen_ ? lora_params_ : params_; }
  bool base_frozen() const { return base_frozen_; }
  const std::optional<LoraConfig>& lora() const { return lora_; }
  // Tensor-parallel ranks (1: none) and this rank among them.
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }

  // The units of its parameter sets (ParameterSet): the embeddings, each layer,
  // the output head (final norm, an untied output projection; LoRA: the adapters
  // of each). A tied output projection stays with the embeddings.
  static constexpr int kEmbeddingUnit = 0;
  static int layer_unit(int64_t layer) { return int(layer) + 1; }
  int head_unit() const { return int(config_.n_layers) + 1; }
  // ZeRO-3: what makes the units present while forward() and backward() run:
  // one at a time (and the next one fetched meanwhile); the head is held from
  // the end of forward() into backward(), and tied embeddings, which the head
  // reads, from the start of forward() to the end of backward(). Null (the
  // default): always present.
  void set_residency(UnitResidency* residency) { residency_ = residency; }

  // Normal(0, init_std) matrices and embeddings, with the residual projections
  // scaled by 1/sqrt(2·n_layers) (GPT-2); norm weights 1, biases 0; LoRA adapters
  // as init_lora does.
  void init_weights(uint64_t seed);
  // LoRA's init: A uniform in ±1/sqrt(in) (PyTorch's kaiming_uniform(a=√5)), B zero.
  void init_lora(uint64_t seed);
  // Folds every adapter into its base weight, W += (alpha/rank)·B·A, and zeroes
  // the adapters (B = 0): the model computes the same function without them.
  void merge_lora();

  // Dropout in LoRA adapters acts only while training (the default); evaluation
  // turns it off. Each forward pass of training names its dropout round (e.g. the
  // global micro-batch index), so masks are reproducible and a resumed run draws
  // the masks the uninterrupted one would have.
  void set_training(bool training) { training_ = training; }
  void set_dropout_round(uint64_t round) { dropout_round_ = round; }

  // Plans and allocates the activations for [batch, seq] inputs. forward() does
  // this itself when the shape changes.
  void reserve(int64_t batch, int64_t seq);
  // Activation checkpointing: keep only each layer's input and recompute the
  // layer in the backward pass (one more forward pass of compute, less down's
  // product, for activation memory of one layer's working set, with its MLP in
  // chunks of rows, plus one [batch, seq, dim] per layer).
  void set_activation_checkpointing(bool on);
  bool activation_checkpointing() const { return plan_options_.checkpointing; }
  // With checkpointing, keeps the layer inputs in host memory: on a GPU the
  // device holds two of them instead of one per layer (one copy out per layer
  // in the forward pass, one back per layer in the backward pass, each on a
  // copy stream while another layer computes). Torchtune's
  // enable_activation_offloading; without checkpointing it does nothing.
  void set_activation_offloading(bool on);
  bool activation_offloading() const { return plan_options_.offload_inputs; }
  size_t activation_bytes() const { return arena_bytes_; }

  // Runs tokens (i32 [batch, seq]) through the model. With targets (i32
  // [batch, seq], ops::kIgnoreIndex masks a position) it also computes the loss
  // and keeps what backward() needs. `positions` (i32 [batch, seq]) packs several
  // samples into a row: each token's position within its own sample (ops.hpp).
  // The output head and the loss run over chunks of rows (at most
  // chunk_bytes() of logits at a time). Training passes loss_scale, the
  // scale backward() will get, when it knows it: each chunk's loss gradient and
  // the head's gradients are then computed right after its loss (where this rank
  // holds the whole vocabulary), and backward() starts below the head.
  ops::LossSum forward(const Tensor& tokens, const Tensor& targets = {}, const Tensor& positions = {},
                       std::optional<double> loss_scale = {});
  // Runs tokens (i32 [batch, seq]) through the model and returns the logits of
  // each range of the flattened [batch·seq] positions, [count, vocab] on the
  // model's device: the output head runs on those rows alone (evaluation scores
  // an ending's few positions of a long row). Not under tensor parallelism.
  struct RowRange {
    int64_t first = 0, count = 0;
  };
  std::vector<Tensor> forward_rows(const Tensor& tokens, std::span<const RowRange> ranges);
  // Logits of the last forward pass, [batch·seq, vocab], where they were
  // computed in one chunk: always without targets, which needs whole logits
  // (kNoChunks) once they exceed a chunk. backward(), or a forward pass given a
  // loss scale, overwrites them with their gradient. (Tensor
  // parallelism: this rank's rows, or, where it splits the vocabulary, all rows
  // and this rank's vocab/tp classes; the loss is the whole batch's.) Where the
  // plan pads their rows (on a GPU), a packed copy.
  Tensor logits() const;
  // Row-wise work (the output head and loss; the MLP under checkpointing) in
  // chunks of rows of at most this many bytes (ActivationOptions, kChunkBytes;
  // a trained head's chunks have kTrainedHeadChunkRows rows or more unless a
  // budget is set here, which is kept exactly); kNoChunks: all rows at once, as
  // forward() without targets needs.
  void set_chunk_bytes(size_t bytes);
  size_t chunk_bytes() const { return plan_options_.chunk_bytes; }
  // Each position's loss of the last forward pass with targets, [batch·seq]
  // (0 where the target is masked; tensor parallelism: this rank's rows).
  Tensor token_losses() const;
  // Tensor parallelism splits the token embeddings and the output projection by
  // vocabulary rows (ModelConfig::splits_vocabulary).
  bool splits_vocabulary() const { return split_vocabulary_; }

  // Told during backward() which trainable parameters' gradients are final, as
  // soon as they are: the output head's, then each layer's from the last (the
  // embeddings' only when backward() returns). Data parallelism reduces them
  // while the rest of the pass runs.
  using GradientsFinal = std::function<void(std::span<Parameter* const>)>;
  // Adds to trainable_params().grads() the gradient of loss_scale · Σ(token
  // losses of the last forward). For the mean loss pass 1 / LossSum::tokens.
  // With token_weights ([batch·seq], token_losses()'s dtype and device) the
  // gradient of loss_scale · Σ w_t · loss_t (DPO weighs each sequence by its
  // pair's loss gradient); the forward pass must then not have been given a
  // loss scale, and there is no tensor parallelism.
  void backward(double loss_scale, const GradientsFinal& on_final = {}, const Tensor& token_weights = {});

  // With adapters off the model computes its base alone (DPO's reference model
  // is the base under the adapters being trained); a forward pass without them
  // cannot be followed by backward().
  void set_adapters_enabled(bool enabled) { adapters_enabled_ = enabled; }

 private:
  friend class Decoder;  // the inference half: decodes with a KV cache over these weights
  // RoPE tables covering positions [0, positions).
  void ensure_rope_tables(int64_t positions);
  void declare_parameters();
  void declare_lora();
  // Sets one of plan_options_; the activations are planned again when it changes.
  template <typename V>
  void replan(V ActivationOptions::*option, V value);
  // forward() up to the output head: embeddings, layers, the final norm
  // (acts_.final_norm_all); the head's unit stays acquired.
  void forward_hidden(const Tensor& tokens, const Tensor& positions);
  // Offloading, once layer i's first norm has written its input: it goes out
  // while the layer runs; before its recompute: it is back, and layer i - 1's
  // starts back.
  void offload_input(int64_t i);
  void restore_input(int64_t i);
  // Layer i's forward pass, up to its mid and MLP branch (acts_.branch): the
  // residual add that ends it is done by the next norm, which writes the next
  // layer's input (or acts_.output) on its way (ops::ResidualAdd).
  void forward_layer(int64_t i);
  // Layer i's first norm, of its input; add_residual: the input is first made,
  // layer i - 1's mid + MLP branch (not for layer 0, nor for a recompute, whose
  // input is kept).
  void attention_norm(int64_t i, bool add_residual);
  // Its attention block, from the normed input to the attention branch (acts_.branch).
  void forward_attention(int64_t i);
  // Rows [first, first + rows) of the MLP's work (Activations::mlp_rows): all
  // rows in one chunk, or under activation checkpointing chunks of them.
  struct MlpChunk {
    bool whole = true;
    int64_t first = 0, rows = 0;
    // The chunk's rows of a tensor of all rows (of all rows' `_all` tensors under tp: whole).
    Tensor part(const Tensor& all) const { return whole || !all.defined() ? all : all.rows(first, rows); }
    // The chunk's part of an MLP working tensor, which holds a chunk.
    Tensor working(const Tensor& chunk) const { return whole || !chunk.defined() ? chunk : chunk.rows(0, rows); }
  };
  std::vector<MlpChunk> mlp_chunks() const;
  // The MLP block on a chunk: mid = input + the attention branch and its norm
  // (one op), up and the activation (what its backward pass reads); then down,
  // into the chunk's rows of acts_.branch.
  void mlp_forward_input(int64_t i, const MlpChunk& chunk);
  void mlp_forward_output(int64_t i, const MlpChunk& chunk);
  void for_each_adapter(const std::function<void(LoraAdapter&)>& fn);
  // DoRA: a.scale and a.inv_norm from the adapter's current weights; a.z, its
  // block of x·Wᵀ + s·u·Bᵀ for these rows (when backward finds it was kept for others).
  // The adapter's scales (and, where `norms` is defined, its rows' norms).
  void dora_norms(LoraAdapter& a, const Tensor& norms = Tensor());
  void dora_block_output(const Tensor& x, const Parameter* weight, LoraAdapter& a, int64_t first_row);
  // y = x·Wᵀ + b plus the projection's LoRA adapters. x may be rows
  // [first_row, ...) of the projection's input (the output head's chunks).
  void project(const Tensor& x, const Parameter* weight, const Parameter* bias, std::vector<LoraAdapter>& adapters,
               const Tensor& y, int64_t first_row = 0);
  // dx = dy·W (+ adapters), and the gradients of whatever is trainable.
  void project_backward(const Tensor& dy, const Tensor& x, const Parameter* weight, const Parameter* bias,
                        std::vector<LoraAdapter>& adapters, const Tensor& dx, int64_t first_row = 0);
  // Each adapter's u = x·Aᵀ (the first part of project()).
  void adapter_inputs(const Tensor& x, std::vector<LoraAdapter>& adapters, int64_t first_row);
  // x as an adapter sees it: with this forward pass's dropout mask applied.
  // The Philox stream of `adapter`'s dropout masks in this forward pass.
  uint64_t dropout_stream(const LoraAdapter& adapter) const;
  Tensor adapter_input(const Tensor& x, const LoraAdapter& adapter, int64_t first_row) const;
  // Rows [first, first + rows) of what the output head and the loss read and
  // write (rows: a chunk's, fewer for the last).
  struct HeadChunk {
    int64_t first = 0;
    Tensor input, logits, targets, losses, lse, d_input;
  };
  std::vector<HeadChunk> head_chunks() const;
  void head_forward(const HeadChunk& chunk) {
    project(chunk.input, lm_head_, nullptr, output_adapters_, chunk.logits, chunk.first);
  }
  void head_backward(const HeadChunk& chunk) {
    project_backward(chunk.logits, chunk.input, lm_head_, nullptr, output_adapters_, chunk.d_input, chunk.first);
  }
  void norm_forward(const Tensor& x, Parameter* weight, Parameter* bias, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd, const ops::ResidualAdd& residual = {});
  void norm_backward(const Tensor& dy, const Tensor& x, Parameter* weight, Parameter* bias, const Tensor& mean,
                     const Tensor& rstd, const Tensor& dx);
  ops::AttentionHeads heads() const;  // this rank's
  ops::GeluApproximation gelu_approximation() const;  // of a GELU MLP
  // Tensor parallelism: this rank's rows of an all-rows tensor, and the
  // collectives between the two (nothing on one rank, where they are one tensor).
  Tensor rows_of(const Tensor& all) const;
  Tensor row_values_of(const Tensor& all) const;  // of a tensor with one value per row
  // Learned positions are added where each row is looked up; with a split
  // vocabulary, where the lookups are summed, rank 0 adds them once.
  bool adds_positions() const { return !split_vocabulary_ || tp_rank_ == 0; }
  void gather_rows(const Tensor& rows, const Tensor& all) const;
  void reduce_scatter_rows(const Tensor& all, const Tensor& rows) const;
  // A row-parallel projection's bias: rank 0 adds it (and owns its gradient).
  const Parameter* row_parallel_bias(const Parameter* bias) const { return tp_rank_ == 0 ? bias : nullptr; }
  // The targets of the last forward pass that this rank's loss covers, [rows]:
  // its rows under tensor parallelism, all rows where the vocabulary is split.
  Tensor loss_targets() const;
  // The classes this rank's embedding rows and logits stand for (the logits'
  // rows may be longer: padded).
  ops::VocabPart vocab_part() const;
  // The last forward pass's logits are all there (one chunk held every row).
  void check_logits_whole() const;
  // A split vocabulary: each row's logsumexp and loss from every rank's part of
  // them (cross_entropy_forward with a VocabPart), written back in place.
  ops::LossSum merge_vocab_parts(int64_t tokens);
  // The trainable parameters of layer i (its adapters with LoRA); i = -1: of the
  // output head (final norm, an untied output projection, their adapters).
  std::vector<Parameter*> trainable_in_layer(int64_t i);
  void acquire(int unit, bool with_grads, int next = -1) {
    if (residency_) residency_->acquire(unit, with_grads, next);
  }
  void release(int unit) {
    if (residency_) residency_->release(unit);
  }

  ModelConfig config_;
  DType dtype_;
  Device device_;
  ParameterSet params_;
  Parameter* tok_embeddings_ = nullptr;
  Parameter* pos_embeddings_ = nullptr;  // learned positions only
  std::vector<LayerParameters> layers_;
  Parameter* final_norm_weight_ = nullptr;
  Parameter* final_norm_bias_ = nullptr;
  Parameter* lm_head_ = nullptr;  // tok_embeddings_ when tied

  // LoRA: per layer, the adapters of each projection (none without LoRA); the
  // output projection's.
  enum Projection { kQkv, kOut, kUp, kDown, kProjections };
  std::optional<LoraConfig> lora_;
  bool base_frozen_ = false;  // with LoRA, or BaseWeights::frozen
  ParameterSet lora_params_;
  std::vector<std::array<std::vector<LoraAdapter>, kProjections>> layer_adapters_;
  std::vector<LoraAdapter> output_adapters_;
  UnitResidency* residency_ = nullptr;
  dist::Communicator* tp_ = nullptr;
  int tp_size_ = 1, tp_rank_ = 0;
  bool split_vocabulary_ = false;
  bool training_ = true;
  bool adapters_enabled_ = true;
  bool forward_had_adapters_ = true;  // the last forward pass's adapters_enabled_
  uint64_t dropout_round_ = 0;
  uint64_t dropout_seed_ = 0;

  Tensor rope_cos_, rope_sin_;  // [seq, hd/2], RoPE only
  Tensor alibi_slopes_;         // this rank's heads', ALiBi only

  Activations acts_;
  size_t arena_bytes_ = 0;  // of the planned shape
  Tensor arena_memory_;      // u8: the largest shape's arena so far (reserve())
  Tensor offloaded_inputs_;  // host memory of the layer inputs offloaded, as large
  ActivationOptions plan_options_;  // what set_activation_* and set_chunk_bytes ask (tp: tp_size_)
  Tensor tokens_, targets_;  // of the last forward, for backward
  ops::TokenPositions positions_;  // checked once per forward: the ops then read them without a synchronization
  // The last forward pass computed the head's gradients for this loss scale.
  std::optional<double> head_grad_scale_;
  // Offloading: the layer inputs in host memory ([n_layers, rows, dim]) and
  // their copies. Last, so that it goes first: it waits for copies into and out
  // of acts_.
  std::unique_ptr<ops::OverlappedCopies> input_copies_;
};

// Training off (no dropout) while it lives: an evaluation pass, which turns it
// on again however the pass ends (a stop request throws out of a validation).
class EvaluationMode {
 public:
  explicit EvaluationMode(Transformer& model) : model_(model) { model_.set_training(false); }
  ~EvaluationMode() { model_.set_training(true); }
  EvaluationMode(const EvaluationMode&) = delete;
  EvaluationMode& operator=(const EvaluationMode&) = delete;

 private:
  Transformer& model_;
};

}  // namespace hone

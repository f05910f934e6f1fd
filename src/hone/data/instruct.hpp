#pragma once
// Fine-tuning data: records (JSONL, a JSON array, Parquet rows, MDS samples)
// turned into a prompt and a response by a template, tokenized, with the prompt masked out of the loss
// unless train_on_input; records tokenized already (Hugging Face's input_ids
// and labels); or LLM Foundry's pre-tokenized MDS samples (prompt and
// response ids per turn), stitched as its collator does. Templates follow torchtune's: alpaca, summarize, plain
// prompt/completion, and chat (`messages` with roles) in the model family's
// format (Llama 3, Llama 2 or ChatML).
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hone/data/batch.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"

namespace hone::data {

// One record of a dataset, and where it came from ("file:line", "file: record
// N" in a JSON array, "file: row N" in Parquet, "folder: sample N" in MDS).
struct Record {
  std::string where;
  nlohmann::json value;  // an object
};
// The records of a dataset path: a .jsonl/.ndjson file or a .json array (either
// may be gzip- or zstd-compressed), a .parquet file, the shards of a dataset (a
// folder of such files or a glob pattern, in name order), or an MDS folder (its
// str, int and json columns).
std::vector<Record> read_records(const std::string& path);

enum class InstructTemplate { alpaca, summarize, plain, chat, text };
enum class ChatFormat { llama3, llama2, chatml };

InstructTemplate parse_instruct_template(const std::string& name);
ChatFormat parse_chat_format(const std::string& name);

struct InstructOptions {
  InstructTemplate format = InstructTemplate::alpaca;
  // The chat template's format; with in_chat_format, the other templates' too:
  // their prompt and response a user's and an assistant's message in it, as
  // torchtune's model tokenizers write every template (its Llama 3 tokenizer in
  // headers, its Llama 2 and Mistral ones in [INST]). Without, plain text.
  ChatFormat chat_format = ChatFormat::llama3;
  bool in_chat_format = false;
  // Template field -> column of the records (fields_read gives the fields).
  // Unmapped fields use their own names.
  std::map<std::string, std::string> column_map;
  bool train_on_input = false;
  int64_t max_seq_len = 512;  // longer samples are cut to this many tokens
  // A chat format's system message when not empty, in place of the record's
  // own; never learned, not even with train_on_input (torchtune's
  // new_system_prompt is masked).
  std::string system_prompt;
  // Chat and pre-tokenized turns: learn every response (torchtune's way), or only
  // the last (LLM Foundry's target_responses: last, its default).
  bool train_on_every_response = true;
  // Pre-tokenized MDS samples: how `bytes` input_ids and labels are read (LLM Foundry's token_encoding_type).
  std::string token_encoding_type = std::string(kDefaultBytesTokenType);
};

// The fields of a record a template reads, by the names column_map maps:
// alpaca reads instruction, input and output; summarize dialogue and output;
// plain input and output; text text; chat messages (or ShareGPT's
// conversations where a record has no messages), or TRL's prompt and
// completion lists. Preference pairs read prompt, chosen and rejected, under
// any template.
std::vector<std::string> fields_read(InstructTemplate format, bool preference_pairs);
// Every field some template or the preference pairs read, in that order, and
// torchtune's ShareGPT name for messages, `conversations`: what column_map takes.
std::vector<std::string> fields_any_template_reads();

// A sample's tokens and labels, the same length; a label is the token itself
// where the loss applies and kIgnoreIndex (-100) where it does not.
struct TokenizedSample {
  std::vector<int32_t> tokens, labels;
};

struct InstructDataset {
  std::vector<TokenizedSample> samples;
  int64_t truncated = 0;  // samples cut to max_seq_len
  int64_t dropped = 0;    // samples left with nothing to learn after truncation
};

// The samples of a dataset path (see read_records), each record through the
// template; records already tokenized as Hugging Face's Trainer takes them
// (`input_ids`; `labels` of the same length, -100 where no loss applies, all
// learned when absent; `attention_mask` 0s for padding, left out) as their
// ids, the template unused; an MDS folder of LLM Foundry's pre-tokenized samples (a `turns` json
// column of {input_ids, labels}, or `input_ids` and `labels` token columns) is
// read as its ids: each turn's prompt (input_ids) then response (labels), EOS
// after the last response unless it ends with one, the template unused. Errors
// name file:line (or the sample) and the missing column.
InstructDataset load_instruct_dataset(const std::string& path, const Tokenizer& tokenizer,
                                      const InstructOptions& options);

// Preference data (DPO), as torchtune's preference_dataset reads it: each
// record a chosen and a rejected answer to one prompt, either as two
// conversations (`chosen` and `rejected` lists of messages, the prompt's turns
// in both, formatted in options.chat_format) or as answer strings to the
// record's `prompt` string (formatted by the template; columns renamed by
// column_map's chosen, rejected and prompt). Each record becomes two samples in
// a row, the chosen first, each with its prompt masked unless train_on_input;
// a pair either of whose samples has nothing left to learn after truncation is
// dropped (`dropped` counts pairs). Errors name the record and the column.
InstructDataset load_preference_dataset(const std::string& path, const Tokenizer& tokenizer,
                                        const InstructOptions& options);

// The prompt text of one record as the template writes it.
std::string format_prompt(const std::map<std::string, std::string>& fields, const InstructOptions& options);

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
  // A message of the record's prompt (TRL's prompt/completion layout, a
  // preference pair's prompt or shared turns): never learned.
  bool prompt = false;
};

// The tokens a model is given to answer, as training formatted its prompts: for
// chat, the messages and then the assistant's header; otherwise the template
// around `text` (the instruction, the dialogue or the plain input), in the
// chat format as a user message where one is given, else after BOS where the
// tokenizer family uses one, with special tokens written in it as their ids
// (as transformers' tokenizer(text) and vLLM read a prompt).
std::vector<int32_t> prompt_tokens(const Tokenizer& tokenizer, const std::string& text, const InstructOptions& options);
// The token that ends an answer: the chat format's end of turn, else EOS (none
// for a tokenizer without one: nanoGPT's characters).
std::optional<int32_t> end_of_answer_token(const Tokenizer& tokenizer, const InstructOptions& options);
// The chat format as a Jinja template, as Hugging Face tokenizers carry one
// (tokenizer_config.json's chat_template): apply_chat_template renders the text
// chat_pieces formats, options.system_prompt included, so a fine-tuned model is
// prompted as it was trained. Nothing for the other templates.
std::optional<std::string> chat_template(const Tokenizer& tokenizer, const InstructOptions& options);

struct SampleStreamOptions {
  int64_t batch_size = 0;  // per rank
  int64_t seq_len = 0;     // the longest row
  // Rows are cut to the longest sample of the global batch, rounded up to a
  // multiple of this (at most seq_len), as torchtune's collate pads to the
  // longest: short samples cost what they hold, not seq_len. 0: every row seq_len.
  int64_t length_multiple = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  // Each run of kLengthGroupBatches global batches takes its samples longest
  // first, so a batch holds samples of similar length and its rows are cut
  // shorter (transformers' group_by_length).
  bool group_by_length = false;
  bool packed = false;
  int32_t pad_id = 0;
  int rank = 0, world_size = 1;
  // The samples come in groups of this many consecutive ones (DPO's pairs: a
  // chosen and a rejected sequence), which shuffling moves whole and keeps in
  // order: batch_size counts groups, a batch holds batch_size · group_size rows,
  // and an epoch counts groups. Not with packed or group_by_length.
  int64_t group_size = 1;
};

// Batches of tokenized samples: shuffled every epoch from a seed, right-padded
// (padding has label -100), split across data-parallel ranks. The targets of
// position t are the labels of position t + 1. State: the sample position.
// Packed, a row holds as many whole samples as fit, each with its own positions
// (Batch::positions: the model then keeps samples from attending to each other),
// and an epoch counts the packed rows of the first pass.
class SampleStream final : public BatchSource {
 public:
  static constexpr int64_t kLengthGroupBatches = 50;  // transformers' megabatches

  SampleStream(std::vector<TokenizedSample> samples, const SampleStreamOptions& options);
  Batch next() override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  void rewind() override {
    position_ = 0;
    one_pass_ = true;
  }
  bool pass_done() const override { return one_pass_ && position_ >= int64_t(samples_.size()); }
  int64_t samples_per_epoch() const override { return rows_per_epoch_ / o_.group_size; }
  std::optional<int64_t> tokens_per_epoch() const override { return tokens_per_epoch_; }
  const char* sample_name() const override { return o_.packed ? "packed row" : nullptr; }

 private:
  const TokenizedSample& sample_at(int64_t position);
  // Fills one row (tokens, targets and, packed, positions) from the samples at
  // position_, advancing it; returns how many of its tokens are samples'.
  int64_t fill_row(int32_t* tokens, int32_t* targets, int32_t* positions);
  std::vector<TokenizedSample> samples_;
  SampleStreamOptions o_;
  int64_t rows_per_epoch_;
  int64_t tokens_per_epoch_ = 0;
  int64_t position_ = 0;
  bool one_pass_ = false;  // since rewind(): no sample past the first pass
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace hone::data

#pragma once
// The data a config names. Pretraining: the documents of dataset.type,
// dataset.path and dataset.validation_path as training and validation ranges
// (validation on the documents of dataset.validation_path where it is set, else
// on the last dataset.validation_fraction of each source of dataset.path).
// Fine-tuning and eval: how instruct records become samples.
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/pretrain_stream.hpp"

namespace hone {

struct TrainingData {
  std::vector<data::DocumentRange> train, validation;  // validation empty: none held out
  std::vector<double> train_weights, validation_weights;  // blend weights (empty: by size)
  std::string description;
};

// dataset.validation_fraction's defaults: of each source's documents, of the records.
inline constexpr double kPretrainingValidationFraction = 0.01;
inline constexpr double kFinetuningValidationFraction = 0.05;
// With dataset.validation_path, nothing is held out of dataset.path: a
// dataset.validation_fraction given too (other than its default or 0) is an
// error, where it would be silently ignored.
void check_one_validation_source(const Config& config, double default_fraction);

TrainingData open_pretraining_data(const Config& config, int64_t vocab_size);
// Its errors that need no file: dataset.type and the paths given with it.
void check_pretraining_data_keys(const Config& config);
// For hone validate, which may run where the data is not: a line for each path
// of dataset.path and dataset.validation_path (each of a blend, whose weights
// are checked) that is not on this machine, or a pattern that matches nothing.
std::vector<std::string> data_paths_not_here(const Config& config);
// options with dataset.block_causal and dataset.eod_mask_loss set from config.
data::StreamOptions with_document_boundaries(const Config& config, data::StreamOptions options);

// The keys of instruct records (dataset.template, chat_format, column_map,
// train_on_input, target_responses, system_prompt), as fine-tuning and eval take them.
// template_default: dataset.template's default (alpaca; DPO's chat).
Schema instruct_dataset_schema(const std::string& template_default = "alpaca");
// Those keys (and dataset.token_encoding_type) as options (max_seq_len left to
// the caller); their errors need no data (hone validate asks for them too).
data::InstructOptions instruct_options_from(const Config& config);

}  // namespace hone

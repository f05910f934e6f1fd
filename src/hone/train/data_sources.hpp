#pragma once
// Opens the documents a training config names (dataset.type, dataset.path and
// dataset.validation_path) as training and validation ranges: validation on
// the documents of dataset.validation_path where it is set, else on the last
// dataset.validation_fraction of each source of dataset.path.
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/data/pretrain_stream.hpp"

namespace hone {

struct TrainingData {
  std::vector<data::DocumentRange> train, validation;  // validation empty: none held out
  std::vector<double> train_weights, validation_weights;  // blend weights (empty: by size)
  std::string description;
};

TrainingData open_pretraining_data(const Config& config, int64_t vocab_size);

}  // namespace hone

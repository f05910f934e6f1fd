#pragma once
// Opens the documents a training config names (dataset.type and dataset.path)
// and splits them into training and validation ranges.
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/data/pretrain_stream.hpp"

namespace hone {

struct TrainingData {
  std::vector<data::DocumentRange> train, validation;  // validation empty: none held out
  std::vector<double> weights;                         // blend weights (empty: by size)
  std::string description;
};

TrainingData open_pretraining_data(const Config& config, int64_t vocab_size);

}  // namespace hone

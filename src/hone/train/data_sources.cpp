#include "hone/train/data_sources.hpp"

#include "hone/core/error.hpp"

namespace hone {

namespace {

void add_source(TrainingData& d, std::shared_ptr<const data::DocumentSource> source, double validation_fraction) {
  auto [train, validation] = data::split_documents(std::move(source), validation_fraction);
  d.train.push_back(train);
  if (validation.end > validation.first) d.validation.push_back(validation);
}

}  // namespace

TrainingData open_pretraining_data(const Config& c, int64_t vocab_size) {
  const std::string type = c.get<std::string>("dataset.type");
  const double validation_fraction = c.get<double>("dataset.validation_fraction");
  TrainingData d;
  if (type == "mock") {
    const int64_t documents = c.get<int64_t>("dataset.mock.documents");
    const int64_t length = c.get<int64_t>("dataset.mock.document_length");
    add_source(d, std::make_shared<data::MockDocuments>(documents, length, vocab_size, uint64_t(c.get<int64_t>("seed"))),
               validation_fraction);
    d.description = d.train.front().source->describe();
  } else {
    fail("{}: dataset.type '{}' is not readable by this build yet", c.origin(), type);
  }
  // A blend is only a blend if every source keeps some validation documents;
  // otherwise validate on what was held out.
  if (d.validation.size() != d.train.size()) d.weights.clear();
  return d;
}

}  // namespace hone

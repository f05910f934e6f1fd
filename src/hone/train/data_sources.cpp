#include "hone/train/data_sources.hpp"

#include <sstream>

#include "hone/core/error.hpp"
#include "hone/data/format_documents.hpp"

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
    // mock is the default type: a path given without a type would be ignored, the run trained on random tokens.
    if (c.has("dataset.path")) {
      fail("{}: dataset.path {} is set but dataset.type is mock, which ignores it: set dataset.type=megatron (a "
           ".bin/.idx prefix or a blend) or dataset.type=mds (a folder with index.json)",
           c.origin_of("dataset.path"), c.get<std::string>("dataset.path"));
    }
    const int64_t documents = c.get<int64_t>("dataset.mock.documents");
    const int64_t length = c.get<int64_t>("dataset.mock.document_length");
    add_source(d, std::make_shared<data::MockDocuments>(documents, length, vocab_size, uint64_t(c.get<int64_t>("seed"))),
               validation_fraction);
    d.description = d.train.front().source->describe();
  } else {
    HONE_CHECK(c.has("dataset.path"), "{}: dataset.type {} needs dataset.path", c.origin_of("dataset.type"), type);
    const std::string path = c.get<std::string>("dataset.path");
    // Megatron's --data-path forms: "PREFIX" or "W1 PREFIX1 W2 PREFIX2 ...".
    std::vector<std::string> words;
    std::istringstream in(path);
    for (std::string w; in >> w;) words.push_back(w);
    std::vector<std::pair<double, std::string>> parts;
    if (words.size() == 1) {
      parts.emplace_back(1.0, words[0]);
    } else {
      HONE_CHECK(words.size() % 2 == 0, "{}: dataset.path '{}' is neither one path nor 'WEIGHT PATH' pairs",
                 c.origin_of("dataset.path"), path);
      for (size_t i = 0; i < words.size(); i += 2) {
        char* end = nullptr;
        const double w = std::strtod(words[i].c_str(), &end);
        HONE_CHECK(*end == '\0' && w > 0, "{}: dataset.path: '{}' should be a positive blend weight before {}",
                   c.origin_of("dataset.path"), words[i], words[i + 1]);
        parts.emplace_back(w, words[i + 1]);
      }
    }
    for (const auto& [weight, p] : parts) {
      std::shared_ptr<const data::DocumentSource> source;
      if (type == "megatron") source = std::make_shared<data::MegatronDocuments>(p);
      else source = std::make_shared<data::MdsDocuments>(p);
      add_source(d, source, validation_fraction);
      if (parts.size() > 1) d.weights.push_back(weight);
      d.description += (d.description.empty() ? "" : ", ") + source->describe();
    }
  }
  // A blend is only a blend if every source keeps some validation documents;
  // otherwise validate on what was held out.
  if (d.validation.size() != d.train.size()) d.weights.clear();
  return d;
}

}  // namespace hone

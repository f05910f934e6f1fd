// Tokenizer throughput on one core: every SOTU speech encoded as its own
// document, MB of UTF-8 text per second. Each run loads a fresh tokenizer (its
// piece cache starts empty) and only the encoding is timed. The last line is
// JSON; bench/tokenizers/run.sh puts it beside npm tiktoken's figure.
//   bench_tokenizers --tokenizer PATH --corpus DIR [--runs N] [--name NAME]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"

int main(int argc, char** argv) {
  std::string tokenizer_path, corpus, name;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tokenizer") tokenizer_path = argv[i + 1];
    else if (flag == "--corpus") corpus = argv[i + 1];
    else if (flag == "--runs") runs = std::stoi(argv[i + 1]);
    else if (flag == "--name") name = argv[i + 1];
  }
  if (tokenizer_path.empty() || corpus.empty()) {
    fmt::print(stderr, "usage: bench_tokenizers --tokenizer PATH --corpus DIR [--runs N] [--name NAME]\n");
    return 2;
  }
  try {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(corpus))
      if (e.path().extension() == ".txt") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<std::string> documents;
    size_t bytes = 0;
    for (const auto& f : files) {
      documents.push_back(hone::read_file(f.string()));
      bytes += documents.back().size();
    }
    HONE_CHECK(!documents.empty(), "{}: no .txt files", corpus);
    std::vector<double> seconds;
    size_t tokens = 0;
    std::vector<int32_t> ids;
    for (int r = 0; r < runs; ++r) {
      const auto tokenizer = hone::load_tokenizer(tokenizer_path);
      tokens = 0;
      const auto start = std::chrono::steady_clock::now();
      for (const auto& d : documents) {
        ids.clear();
        tokenizer->encode_into(d, ids);
        tokens += ids.size();
      }
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    fmt::print("{{\"implementation\": \"hone\", \"tokenizer\": \"{}\", \"documents\": {}, \"bytes\": {}, \"tokens\": {}, "
               "\"runs\": {}, \"median_s\": {:.4f}, \"mb_per_s\": {:.2f}}}\n",
               name.empty() ? tokenizer_path : name, documents.size(), bytes, tokens, runs, median,
               double(bytes) / 1e6 / median);
  } catch (const hone::Error& e) {
    fmt::print(stderr, "bench_tokenizers: error: {}\n", e.what());
    return 2;
  }
  return 0;
}

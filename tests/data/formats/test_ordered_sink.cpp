// OrderedDocumentSink: the output is byte-identical for any number of threads,
// and a writer's error reaches every thread.
#include <atomic>
#include <thread>

#include "formats_test.hpp"
#include "hone/data/formats/megatron.hpp"
#include "hone/data/formats/ordered_sink.hpp"

namespace hone::test {
namespace {

using data::MegatronDType;
using data::MegatronWriter;
using data::OrderedDocumentSink;

using OrderedSinkTest = FormatsTest;

std::vector<int32_t> document(uint64_t k) {
  std::vector<int32_t> tokens(k % 17);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((k * 31 + i * 7) % 1000);
  return tokens;
}

// Writes `count` documents from `threads` workers that take numbers from a shared
// counter, as preprocess's tokenizer threads do; uneven work shuffles the finish order.
void write_parallel(const std::string& prefix, int threads, uint64_t count, size_t window) {
  MegatronWriter writer(prefix, MegatronDType::u16);
  OrderedDocumentSink sink(writer, window);
  std::atomic<uint64_t> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (uint64_t k; (k = next++) < count;) {
        if (k % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50 * (k % 3)));
        sink.submit(k, document(k));
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(sink.written(), count);
  sink.finish();
}

TEST_F(OrderedSinkTest, OutputIsIdenticalForAnyNumberOfThreads) {
  write_parallel(path("t1"), 1, 3000, 1);
  const auto bin = read_bytes(path("t1.bin")), idx = read_bytes(path("t1.idx"));
  for (int threads : {2, 4, 8}) {
    const std::string prefix = path(fmt::format("t{}", threads));
    write_parallel(prefix, threads, 3000, size_t(threads) * 2);
    EXPECT_EQ(read_bytes(prefix + ".bin"), bin) << threads;
    EXPECT_EQ(read_bytes(prefix + ".idx"), idx) << threads;
  }
  data::MegatronDataset ds(path("t8"));
  EXPECT_EQ(ds.document_count(), 3000u);
  EXPECT_EQ(ds.tokens(ds.document_sequences(16).first), document(16));
}

TEST_F(OrderedSinkTest, WriterErrorsReachEveryThread) {
  MegatronWriter writer(path("d"), MegatronDType::u16);
  OrderedDocumentSink sink(writer, 4);
  std::atomic<uint64_t> next{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&] {
      try {
        for (uint64_t k; (k = next++) < 1000;) sink.submit(k, k == 100 ? std::vector<int32_t>{70000} : document(k));
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("document 100 has token id 70000"), std::string::npos) << e.what();
        ++failures;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 4);
  expect_error([&] { sink.finish(); }, {path("d") + ".bin", "document 100"});
}

TEST_F(OrderedSinkTest, MissingDocumentIsAnError) {
  MegatronWriter writer(path("d"), MegatronDType::u16);
  OrderedDocumentSink sink(writer, 8);
  sink.submit(0, document(0));
  sink.submit(2, document(2));
  expect_error([&] { sink.submit(2, document(2)); }, {"document 2 was submitted twice"});
  expect_error([&] { sink.finish(); }, {"document 1 was never submitted"});
}

}  // namespace
}  // namespace hone::test

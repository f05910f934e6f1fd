// The pretraining stream: packing, per-epoch shuffles, exact resume, rank
// sharding and weighted blending.
#include <map>
#include <numeric>
#include <set>

#include "hone/data/pretrain_stream.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

using data::DocumentRange;
using data::PretrainStream;

// Documents whose tokens are their global positions: a sample's first token
// tells where in the concatenation it starts.
std::shared_ptr<data::InMemoryDocuments> numbered(std::vector<int64_t> lengths) {
  std::vector<std::vector<int32_t>> docs;
  int32_t next = 0;
  for (int64_t n : lengths) {
    docs.emplace_back();
    for (int64_t i = 0; i < n; ++i) docs.back().push_back(next++);
  }
  return std::make_shared<data::InMemoryDocuments>(std::move(docs));
}

DocumentRange all_of(std::shared_ptr<const data::DocumentSource> s) { return {s, 0, s->num_documents()}; }

std::vector<int32_t> rows(const Batch& b) { return b.tokens.to_vector<int32_t>(); }

TEST(PretrainStream, PacksWindowsAcrossDocumentsWithShiftedTargets) {
  auto docs = numbered({5, 3, 9, 4});  // 21 tokens: samples of 4 + 1 -> 5 samples
  PretrainStream s({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 5, .seed = 1, .shuffle = false});
  EXPECT_EQ(s.samples_per_epoch(), 5);
  Batch b = s.next();
  auto t = b.tokens.to_vector<int32_t>(), y = b.targets.to_vector<int32_t>();
  for (int32_t row = 0; row < 5; ++row)
    for (int32_t i = 0; i < 4; ++i) {
      EXPECT_EQ(t[size_t(row * 4 + i)], row * 4 + i);      // windows start every seq_len tokens...
      EXPECT_EQ(y[size_t(row * 4 + i)], row * 4 + i + 1);  // ...and targets are the next token
    }
}

TEST(PretrainStream, EveryEpochVisitsEverySampleOnceInANewOrder) {
  auto docs = numbered({40, 17, 23, 41});  // 121 tokens, seq 8 -> 15 samples
  PretrainStream s({all_of(docs)}, {}, {.seq_len = 8, .batch_size = 5, .seed = 7});
  std::vector<std::vector<int32_t>> epochs(2);
  for (int batch = 0; batch < 6; ++batch) {
    auto r = rows(s.next());
    epochs[size_t(batch / 3)].insert(epochs[size_t(batch / 3)].end(), r.begin(), r.end());
  }
  for (auto& e : epochs) {
    // 15 samples of 8 inputs: 120 of the 121 tokens, each once.
    EXPECT_EQ(std::set<int32_t>(e.begin(), e.end()).size(), 120u);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled
}

// Megatron's GPTDataset shuffles the documents before cutting samples, so a
// sample does not always hold the same neighbouring documents: each pass
// concatenates them in a new order, and every document stays whole and in order.
TEST(PretrainStream, EveryEpochConcatenatesTheDocumentsInANewOrder) {
  const std::vector<int64_t> lengths = {6, 9, 4, 7, 5, 8, 6, 9, 3, 7, 5, 6};  // 75 tokens, seq 4 -> 18 samples
  auto docs = numbered(lengths);
  std::set<int32_t> first_tokens, last_tokens;  // of each document
  int32_t next = 0;
  for (int64_t n : lengths) {
    first_tokens.insert(next);
    last_tokens.insert(next + int32_t(n) - 1);
    next += int32_t(n);
  }
  PretrainStream s({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 18, .seed = 5});
  std::vector<std::set<std::pair<int32_t, int32_t>>> seams(3);  // (last token, first token) of neighbours
  for (auto& epoch : seams) {
    Batch b = s.next();
    auto t = b.tokens.to_vector<int32_t>(), y = b.targets.to_vector<int32_t>();
    for (size_t i = 0; i < t.size(); ++i) {
      if (y[i] == t[i] + 1) continue;  // inside a document
      EXPECT_TRUE(last_tokens.count(t[i]) && first_tokens.count(y[i])) << t[i] << " -> " << y[i];
      epoch.insert({t[i], y[i]});
    }
    EXPECT_FALSE(epoch.empty()) << "documents kept their file order";
  }
  EXPECT_NE(seams[0], seams[1]);
  EXPECT_NE(seams[1], seams[2]);
}

// Megatron's --reset-position-ids --reset-attention-mask (block_causal) and
// --eod-mask-loss, where documents 5, 3, 9, 4 tokens long start at tokens 0, 5,
// 8 and 17. A sample that starts inside a document starts at position 0, as
// Megatron's position ids do.
TEST(PretrainStream, DocumentsAsSequencesOfTheirOwnAndNoLossAcrossThem) {
  auto docs = numbered({5, 3, 9, 4});
  PretrainStream s({all_of(docs)}, {},
                   {.seq_len = 4, .batch_size = 5, .shuffle = false, .block_causal = true, .eod_mask_loss = true});
  const Batch b = s.next();
  const int32_t x = data::kIgnoreTarget;
  EXPECT_EQ(b.tokens.to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  // No target where the input is a document's last token (4, 7, 16); 8's
  // document starts the sample: its last input 7 is the one before.
  EXPECT_EQ(b.targets.to_vector<int32_t>(),
            (std::vector<int32_t>{1, 2, 3, 4, x, 6, 7, x, 9, 10, 11, 12, 13, 14, 15, 16, x, 18, 19, 20}));
  EXPECT_EQ(b.positions.to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 3, 0, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 1, 2}));

  PretrainStream learns_every_token({all_of(docs)}, {},
                                    {.seq_len = 4, .batch_size = 5, .shuffle = false, .block_causal = true});
  const Batch every = learns_every_token.next();
  std::vector<int32_t> next_tokens(20);
  std::iota(next_tokens.begin(), next_tokens.end(), 1);
  EXPECT_EQ(every.targets.to_vector<int32_t>(), next_tokens);
  EXPECT_EQ(every.positions.to_vector<int32_t>(), b.positions.to_vector<int32_t>());
  PretrainStream across_documents({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 5, .shuffle = false});
  EXPECT_FALSE(across_documents.next().positions.defined());
}

// After rewind() (an evaluation pass) the samples past one pass are padding
// without targets, on every rank, and pass_done() says when all were read.
TEST(PretrainStream, AnEvaluationPassReadsEachSampleOnce) {
  auto docs = numbered({5, 3, 9, 4});  // 5 samples of 4 + 1
  for (int rank = 0; rank < 2; ++rank) {
    PretrainStream s({all_of(docs)}, {},
                     {.seq_len = 4, .batch_size = 2, .shuffle = false, .rank = rank, .world_size = 2});
    s.rewind();
    EXPECT_FALSE(s.pass_done());
    const Batch first = s.next();  // samples 0 to 3: this rank's two
    EXPECT_EQ(first.tokens.to_vector<int32_t>()[0], rank * 8);
    EXPECT_FALSE(s.pass_done());
    const Batch last = s.next();  // sample 4 (rank 0's first row), then padding
    EXPECT_TRUE(s.pass_done());
    const std::vector<int32_t> targets = last.targets.to_vector<int32_t>();
    const int64_t learned = std::ranges::count_if(targets, [](int32_t t) { return t != data::kIgnoreTarget; });
    EXPECT_EQ(learned, rank == 0 ? 4 : 0) << rank;
    if (rank == 0) {
      EXPECT_EQ(std::vector<int32_t>(targets.begin(), targets.begin() + 4), (std::vector<int32_t>{17, 18, 19, 20}));
    }
    s.rewind();  // the same pass again
    EXPECT_EQ(s.next().tokens.to_vector<int32_t>(), first.tokens.to_vector<int32_t>());
  }
}

TEST(PretrainStream, RestoredStateContinuesWithTheSameBatches) {
  auto docs = numbered({300, 211, 97});
  auto a = numbered({50, 50}), b = numbered({70});
  for (bool blended : {false, true}) {
    auto make = [&] {
      if (blended) return PretrainStream({all_of(a), all_of(b)}, {0.3, 0.7}, {.seq_len = 6, .batch_size = 3, .seed = 3});
      return PretrainStream({all_of(docs)}, {}, {.seq_len = 6, .batch_size = 3, .seed = 3});
    };
    PretrainStream first = make();
    for (int i = 0; i < 50; ++i) first.next();  // several epochs
    const nlohmann::json saved = first.state();
    std::vector<std::vector<int32_t>> expected;
    for (int i = 0; i < 20; ++i) expected.push_back(rows(first.next()));
    PretrainStream resumed = make();
    resumed.restore(saved);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(rows(resumed.next()), expected[size_t(i)]) << "batch " << i;
  }
  PretrainStream other({all_of(numbered({20}))}, {}, {.seq_len = 6, .batch_size = 3, .seed = 3});
  PretrainStream mine({all_of(docs)}, {}, {.seq_len = 6, .batch_size = 3, .seed = 3});
  EXPECT_THROW(other.restore(mine.state()), Error);  // another dataset: not the same run
  // A state edited by hand is named, not replayed (a negative position indexed before the data).
  for (const auto& [key, value] : {std::pair<std::string, nlohmann::json>{"position", -1},
                                   {"position", "12"},
                                   {"samples_per_epoch", "many"}}) {
    nlohmann::json edited = mine.state();
    edited[key] = value;
    const std::string err = error_of([&] { mine.restore(edited); });
    EXPECT_NE(err.find(key == "position" ? "has no 'position' of 0 or more" : "had \"many\" samples per epoch"),
              std::string::npos)
        << err;
  }
}

TEST(PretrainStream, RanksSplitTheGlobalBatch) {
  auto docs = numbered({500});
  PretrainStream whole({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 6, .seed = 9});
  PretrainStream r0({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 3, .seed = 9, .rank = 0, .world_size = 2});
  PretrainStream r1({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 3, .seed = 9, .rank = 1, .world_size = 2});
  for (int i = 0; i < 5; ++i) {
    auto w = rows(whole.next()), a = rows(r0.next()), b = rows(r1.next());
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, w);
  }
}

TEST(PretrainStream, BlendsByWeight) {
  auto a = numbered({1000}), b = numbered({1000});  // b's tokens repeat a's ids; tell them apart by position
  std::vector<std::vector<int32_t>> offset_docs(1, std::vector<int32_t>(1000));
  for (int i = 0; i < 1000; ++i) offset_docs[0][size_t(i)] = 100000 + i;
  auto c = std::make_shared<data::InMemoryDocuments>(offset_docs);
  PretrainStream s({all_of(a), all_of(c)}, {3.0, 1.0}, {.seq_len = 4, .batch_size = 8, .seed = 2});
  int from_a = 0, total = 0;
  for (int i = 0; i < 50; ++i) {
    auto r = rows(s.next());
    for (int row = 0; row < 8; ++row, ++total) from_a += r[size_t(row * 4)] < 100000;
  }
  EXPECT_EQ(from_a, total * 3 / 4);  // the greedy blend is exact at multiples of the ratio
  // In Megatron's order (build_blending_indices: weight · max(sample, 1) − taken,
  // the first of equals): 0.9/0.1 takes the second source at samples 1 and 11.
  PretrainStream order({all_of(a), all_of(c)}, {0.9, 0.1}, {.seq_len = 4, .batch_size = 20, .seed = 2});
  const auto first = rows(order.next());
  std::vector<int> sources;
  for (int row = 0; row < 20; ++row) sources.push_back(first[size_t(row * 4)] >= 100000);
  EXPECT_EQ(sources, (std::vector<int>{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(PretrainStream, SplitAndTooSmallData) {
  auto docs = numbered({10, 10, 10, 10, 10, 10, 10, 10, 10, 10});
  auto [train, valid] = data::split_documents(docs, 0.2);
  EXPECT_EQ(train.end - train.first, 8);
  EXPECT_EQ(valid.first, 8);
  EXPECT_EQ(valid.end, 10);
  EXPECT_THROW(PretrainStream({all_of(numbered({4}))}, {}, {.seq_len = 4, .batch_size = 1}), Error);
}

// Data tokenized for a larger vocabulary fails where it is read, naming the
// source and the document, not later inside the embedding.
TEST(PretrainStream, ATokenOutsideTheVocabularyNamesItsDocument) {
  auto docs = numbered({5, 3, 9, 4});  // tokens 0..20; document 2 holds 8..16
  const data::StreamOptions options{.seq_len = 4, .batch_size = 5, .shuffle = false, .vocab_size = 12};
  PretrainStream s({all_of(docs)}, {}, options);
  try {
    s.next();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "4 in-memory documents: document 2 holds token id 12, outside the model's vocabulary of 12 "
                 "(tokenized for another model?)");
  }
  PretrainStream fits({all_of(docs)}, {}, {.seq_len = 4, .batch_size = 5, .shuffle = false, .vocab_size = 21});
  EXPECT_NO_THROW(fits.next());
}

TEST(MockDocuments, AreLearnableProgressions) {
  data::MockDocuments m(10, 50, 97, 1);
  std::vector<int32_t> t(50);
  m.read(3, 0, t);
  const int32_t stride = (t[1] - t[0] + 97) % 97;
  EXPECT_GE(stride, 1);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_EQ((t[i] - t[i - 1] + 97) % 97, stride);
  std::vector<int32_t> tail(10);
  m.read(3, 40, tail);
  EXPECT_EQ(std::vector<int32_t>(t.begin() + 40, t.end()), tail);
}

}  // namespace
}  // namespace hone::test

// Megatron indexed datasets: the exact bytes of .bin/.idx, round trips, and every
// way a pair of files can be truncated or corrupted.
#include <sys/wait.h>

#include <cstring>

#include "formats_test.hpp"
#include "hone/data/formats/megatron.hpp"

namespace hone::test {
namespace {

using data::MegatronDataset;
using data::MegatronDType;
using data::MegatronWriter;

using MegatronTest = FormatsTest;

// The .idx of Megatron's _IndexWriter, built field by field.
std::vector<uint8_t> idx_bytes(uint8_t code, const std::vector<int32_t>& lengths, const std::vector<int64_t>& pointers,
                               const std::vector<int64_t>& documents) {
  std::vector<uint8_t> out{'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  put(out, uint64_t(1));
  put(out, code);
  put(out, uint64_t(lengths.size()));
  put(out, uint64_t(documents.size()));
  for (int32_t v : lengths) put(out, v);
  for (int64_t v : pointers) put(out, v);
  for (int64_t v : documents) put(out, v);
  return out;
}

TEST_F(MegatronTest, BytesMatchMegatronLayoutForUint16) {
  // Document 0 has two sequences (--split-sentences), document 1 is empty (a boundary
  // without sequences, as Megatron's builder writes it), document 2 one sequence.
  MegatronWriter w(path("d"), MegatronDType::u16, 50257);
  const std::vector<int32_t> a{1, 2, 3, 4, 5}, a_lengths{2, 3}, c{300};
  w.add_document(a, a_lengths);
  w.add_document({});
  w.add_document(c);
  w.finish();
  EXPECT_EQ(read_bytes(path("d.bin")), (std::vector<uint8_t>{1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 0x2c, 0x01}));
  const std::vector<uint8_t> expected = {
      'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // magic
      1, 0, 0, 0, 0, 0, 0, 0,                   // version
      8,                                        // dtype code: uint16
      3, 0, 0, 0, 0, 0, 0, 0,                   // sequences
      4, 0, 0, 0, 0, 0, 0, 0,                   // document indices
      2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0,       // lengths (i32)
      0, 0, 0, 0, 0, 0, 0, 0,                   // pointers (i64, bytes)
      4, 0, 0, 0, 0, 0, 0, 0,                   //
      10, 0, 0, 0, 0, 0, 0, 0,                  //
      0, 0, 0, 0, 0, 0, 0, 0,                   // document indices (i64)
      2, 0, 0, 0, 0, 0, 0, 0,                   //
      2, 0, 0, 0, 0, 0, 0, 0,                   //
      3, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(read_bytes(path("d.idx")), expected);
  EXPECT_EQ(expected, idx_bytes(8, {2, 3, 1}, {0, 4, 10}, {0, 2, 2, 3}));
  EXPECT_EQ(listing(), (std::vector<std::string>{"d.bin", "d.idx"}));
}

TEST_F(MegatronTest, BytesMatchMegatronLayoutForInt32) {
  MegatronWriter w(path("d"), MegatronDType::i32, 128256);
  const std::vector<int32_t> a{70000, 1}, b{128255};
  w.add_document(a);
  w.add_document(b);
  w.finish();
  EXPECT_EQ(read_bytes(path("d.bin")), (std::vector<uint8_t>{0x70, 0x11, 0x01, 0, 1, 0, 0, 0, 0xff, 0xf4, 0x01, 0}));
  EXPECT_EQ(read_bytes(path("d.idx")), idx_bytes(4, {2, 1}, {0, 8}, {0, 1, 2}));
}

TEST_F(MegatronTest, DtypeChoiceAndOutputNamesFollowMegatron) {
  EXPECT_EQ(data::megatron_dtype_for_vocab(50257), MegatronDType::u16);
  EXPECT_EQ(data::megatron_dtype_for_vocab(65499), MegatronDType::u16);
  EXPECT_EQ(data::megatron_dtype_for_vocab(65500), MegatronDType::i32);
  EXPECT_EQ(data::megatron_output_prefix("out/wiki", "text", false), "out/wiki_text_document");
  EXPECT_EQ(data::megatron_output_prefix("out/wiki", "text", true), "out/wiki_text_sentence");
}

TEST_F(MegatronTest, RoundTripKeepsDocumentsSequencesAndTokens) {
  for (MegatronDType dtype : {MegatronDType::u16, MegatronDType::i32}) {
    const std::string prefix = path(std::string(data::megatron_dtype_name(dtype)));
    const int32_t vocab = dtype == MegatronDType::u16 ? 65536 : 200000;
    std::vector<std::vector<std::vector<int32_t>>> docs;  // document -> sequences -> tokens
    uint64_t state = 12345;
    auto next = [&](uint64_t bound) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return (state >> 33) % bound;
    };
    {
      MegatronWriter w(prefix, dtype, uint64_t(vocab));
      for (int d = 0; d < 200; ++d) {
        std::vector<std::vector<int32_t>> doc(next(4));  // 0..3 sequences
        std::vector<int32_t> tokens, lengths;
        for (auto& seq : doc) {
          seq.resize(next(50));
          for (int32_t& t : seq) t = int32_t(next(uint64_t(vocab)));
          tokens.insert(tokens.end(), seq.begin(), seq.end());
          lengths.push_back(int32_t(seq.size()));
        }
        w.add_document(tokens, lengths);
        docs.push_back(doc);
      }
      EXPECT_EQ(w.documents(), 200u);
      w.finish();
    }
    MegatronDataset ds(prefix);
    ASSERT_EQ(ds.dtype(), dtype);
    ASSERT_EQ(ds.document_count(), docs.size());
    uint64_t seq = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      const auto [first, last] = ds.document_sequences(d);
      ASSERT_EQ(first, seq);
      ASSERT_EQ(last - first, docs[d].size());
      for (const auto& expected : docs[d]) {
        EXPECT_EQ(ds.tokens(seq), expected);
        if (dtype == MegatronDType::u16) {
          auto span = ds.sequence<uint16_t>(seq);
          EXPECT_EQ(std::vector<int32_t>(span.begin(), span.end()), expected);
        } else {
          auto span = ds.sequence<int32_t>(seq);
          EXPECT_EQ(std::vector<int32_t>(span.begin(), span.end()), expected);
        }
        ++seq;
      }
    }
    EXPECT_EQ(ds.sequence_count(), seq);
    expect_error([&] { ds.sequence<int64_t>(0); }, {prefix + ".idx", "read as int64"});
    expect_error([&] { ds.tokens(seq); }, {prefix + ".idx", "out of range"});
  }
}

TEST_F(MegatronTest, VocabularyTooLargeForTheDtypeFailsBeforeWriting) {
  expect_error([&] { MegatronWriter(path("d"), MegatronDType::u16, 128256); },
               {path("d") + ".bin", "128256", "does not fit uint16"});
  expect_error([&] { MegatronWriter(path("d"), MegatronDType::i64, 10); }, {path("d") + ".bin", "uint16 or int32"});
  EXPECT_TRUE(listing().empty());
}

TEST_F(MegatronTest, TokenOutsideTheDtypeFailsAndLeavesNothing) {
  {
    MegatronWriter w(path("d"), MegatronDType::u16);
    const std::vector<int32_t> ok{1, 2}, bad{3, 65536};
    w.add_document(ok);
    expect_error([&] { w.add_document(bad); }, {path("d") + ".bin", "document 1", "65536", "position 1", "uint16"});
    const std::vector<int32_t> negative{-1};
    MegatronWriter w32(path("e"), MegatronDType::i32);
    expect_error([&] { w32.add_document(negative); }, {path("e") + ".bin", "token id -1"});
    const std::vector<int32_t> lengths{1, 5};
    expect_error([&] { w.add_document(ok, lengths); }, {"add up to 6", "2 tokens"});
  }
  EXPECT_TRUE(listing().empty());  // no temporary file survives either
}

TEST_F(MegatronTest, InterruptedWriteLeavesNoFinalFile) {
  // A writer destroyed without finish() (an exception) removes its temporary file.
  {
    MegatronWriter w(path("d"), MegatronDType::u16);
    const std::vector<int32_t> tokens(1000, 7);
    w.add_document(tokens);
  }
  EXPECT_TRUE(listing().empty());
  // A process killed mid-write leaves only a temporary name behind.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    MegatronWriter w(path("d"), MegatronDType::u16);
    const std::vector<int32_t> tokens(1 << 20, 7);  // past the 1 MiB buffer: bytes reach the disk
    w.add_document(tokens);
    ::_exit(0);  // no destructors, no finish()
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  for (const std::string& name : listing()) {
    EXPECT_NE(name, "d.bin");
    EXPECT_NE(name, "d.idx");
    EXPECT_NE(name.find(".tmp."), std::string::npos) << name;
  }
  EXPECT_FALSE(listing().empty());
}

TEST_F(MegatronTest, FinishReplacesAnEarlierDataset) {
  const std::vector<int32_t> old_tokens{1, 2, 3}, new_tokens{9};
  for (const auto* tokens : {&old_tokens, &new_tokens}) {
    MegatronWriter w(path("d"), MegatronDType::u16);
    w.add_document(*tokens);
    w.finish();
  }
  MegatronDataset ds(path("d"));
  EXPECT_EQ(ds.tokens(0), new_tokens);
  EXPECT_EQ(listing(), (std::vector<std::string>{"d.bin", "d.idx"}));
}

class MegatronCorruptionTest : public MegatronTest {
 protected:
  void SetUp() override {
    MegatronTest::SetUp();
    MegatronWriter w(path("d"), MegatronDType::u16);
    const std::vector<int32_t> a{1, 2, 3}, b{4, 5};
    w.add_document(a);
    w.add_document(b);
    w.finish();
    idx_ = read_bytes(path("d.idx"));
    bin_ = read_bytes(path("d.bin"));
  }
  // Writes the (modified) files and expects opening them to fail naming `file`.
  void expect_open_error(std::initializer_list<std::string> fragments, const std::string& file = "d.idx") {
    write_bytes(path("d.idx"), idx_);
    write_bytes(path("d.bin"), bin_);
    std::vector<std::string> all(fragments);
    expect_error([&] { MegatronDataset ds(path("d")); }, {path(file), all.at(0), all.size() > 1 ? all[1] : all[0]});
  }
  template <typename T>
  void set(size_t offset, T value) {
    std::memcpy(idx_.data() + offset, &value, sizeof value);
  }

  std::vector<uint8_t> idx_, bin_;
};

TEST_F(MegatronCorruptionTest, TruncatedBin) {
  bin_.resize(bin_.size() - 2);
  // The last sequence's pointer sits at byte 34 + 2*4 + 8 = 50.
  expect_open_error({"sequence 1 (pointer at byte 50) covers bytes 6..10", "has 8 bytes"}, "d.bin");
}

TEST_F(MegatronCorruptionTest, TruncatedIdx) {
  idx_.resize(idx_.size() - 8);
  expect_open_error({"declares 2 sequences and 3 document indices", "need 48 bytes"});
  idx_.resize(20);
  expect_open_error({"20 bytes is too short", "34 bytes"});
  idx_.clear();
  expect_open_error({"0 bytes is too short"});
}

TEST_F(MegatronCorruptionTest, HeaderFields) {
  idx_[0] = 'X';
  expect_open_error({"bytes 0..8", "MMIDIDX"});
  idx_[0] = 'M';
  set<uint64_t>(9, 2);
  expect_open_error({"version 2 at byte 9", "expected 1"});
  set<uint64_t>(9, 1);
  idx_[17] = 9;
  expect_open_error({"dtype code 9 at byte 17"});
  idx_[17] = 8;
  set<uint64_t>(18, ~uint64_t(0));  // absurd counts must not overflow the size check
  expect_open_error({"declares 18446744073709551615 sequences", "over 2^64"});
}

TEST_F(MegatronCorruptionTest, LengthsPointersAndDocumentIndices) {
  const size_t lengths = 34, pointers = 34 + 2 * 4, documents = 34 + 2 * 12;
  set<int32_t>(lengths + 4, -1);
  expect_open_error({"sequence 1 has length -1 (byte 38)"});
  set<int32_t>(lengths + 4, 2);
  set<int64_t>(pointers + 8, 5);
  expect_open_error({"sequence 1 has pointer 5 (byte 50)", "multiple of 2"});
  set<int64_t>(pointers + 8, int64_t(1) << 62);
  expect_open_error({"sequence 1 (pointer at byte 50)", "which has 10 bytes"});
  set<int64_t>(pointers + 8, 6);
  set<int64_t>(documents, 1);
  expect_open_error({"document index 0 (byte 58) is 1", "expected 0"});
  set<int64_t>(documents, 0);
  set<int64_t>(documents + 16, 1);
  expect_open_error({"last document index (byte 74) is 1", "sequence count 2"});
  set<int64_t>(documents + 8, 2);
  set<int64_t>(documents + 16, 1);
  expect_open_error({"document index 2 (byte 74) is 1", "2..2"});
}

// Megatron writes the sequences back to back (were: overlaps and stray bytes read silently).
TEST_F(MegatronCorruptionTest, SequencesLieBackToBack) {
  const size_t pointers = 34 + 2 * 4;
  set<int64_t>(pointers + 8, 4);  // inside the first sequence, bytes 0..6
  expect_open_error({"sequence 1 has pointer 4 (byte 50), expected 6 (where sequence 0 ends;", "back to back"});
  set<int64_t>(pointers + 8, 6);
  bin_.insert(bin_.end(), {0, 0});
  expect_open_error({"its sequences end at byte 10 of " + path("d.bin") + ", which has 12 bytes"});
}

TEST_F(MegatronCorruptionTest, MissingFiles) {
  std::filesystem::remove(path("d.bin"));
  expect_error([&] { MegatronDataset ds(path("d")); }, {path("d.bin"), "cannot open"});
}

}  // namespace
}  // namespace hone::test

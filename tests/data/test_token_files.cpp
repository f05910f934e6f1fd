// Token files as nanoGPT and llm.c train on them: nanoGPT's bare uint16 arrays
// and llm.c's shards behind their 256-int32 header, split into documents at an
// EOD id or read as one.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "hone/data/format_documents.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class TokenFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_token_files_" + std::to_string(::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The bytes of `values`, each of sizeof(T), as numpy's tofile writes them.
  template <typename T>
  static std::string bytes_of(const std::vector<T>& values) {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // llm.c's write_datafile: 256 int32 (magic, version, token count, zeros), then the tokens.
  template <typename T>
  std::string write_llmc(const std::string& name, int32_t magic, int32_t version, const std::vector<T>& tokens,
                         int32_t count) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    return write(name, bytes_of(header) + bytes_of(tokens));
  }
  static std::vector<std::vector<int32_t>> documents(const data::DocumentSource& source) {
    std::vector<std::vector<int32_t>> docs;
    for (int64_t d = 0; d < source.num_documents(); ++d) {
      docs.emplace_back(size_t(source.document_length(d)));
      source.read(d, 0, docs.back());
    }
    return docs;
  }
  std::string dir_;
};

using Docs = std::vector<std::vector<int32_t>>;

TEST_F(TokenFiles, NanoGptsBareUint16Tokens) {
  const std::string path = write("train.bin", bytes_of(std::vector<uint16_t>{5, 50256, 7, 8, 50256, 9, 65535}));
  const data::TokenFileDocuments one(path, std::nullopt);
  EXPECT_EQ(documents(one), (Docs{{5, 50256, 7, 8, 50256, 9, 65535}}));
  EXPECT_EQ(one.describe(), path + " (nanoGPT tokens, 7 tokens, 1 document)");
  // Each document ends with the EOD; the text after the last one is a document too.
  const data::TokenFileDocuments split(path, 50256);
  EXPECT_EQ(documents(split), (Docs{{5, 50256}, {7, 8, 50256}, {9, 65535}}));
  std::vector<int32_t> middle(2);
  split.read(1, 1, middle);
  EXPECT_EQ(middle, (std::vector<int32_t>{8, 50256}));
  // A file that ends with the EOD has no empty document after it.
  const std::string ended = write("ended.bin", bytes_of(std::vector<uint16_t>{1, 0, 2, 0}));
  EXPECT_EQ(documents(data::TokenFileDocuments(ended, 0)), (Docs{{1, 0}, {2, 0}}));
  // A Megatron PREFIX.bin (its index beside it; its tokens may be int32) is named as such, not read as uint16.
  const std::string megatron = write("corpus_text_document.bin", bytes_of(std::vector<int32_t>{70000, 3}));
  write("corpus_text_document.idx", "MMIDIDX");
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(megatron, std::nullopt); }),
            megatron + ": a Megatron .bin file (" + dir_ + "/corpus_text_document.idx is beside it): "
            "dataset.type=megatron dataset.path=" + dir_ + "/corpus_text_document reads it with its index (nanoGPT's "
            "token files have none)");
}

TEST_F(TokenFiles, LlmcShardsOfGpt2AndLlama3) {
  const std::string gpt2 = write_llmc<uint16_t>("gpt2.bin", 20240520, 1, {50256, 3, 4, 50256, 6}, 5);
  const data::TokenFileDocuments shard(gpt2, 50256);
  // llm.c puts the EOD before each document: the first is the EOD alone.
  EXPECT_EQ(documents(shard), (Docs{{50256}, {3, 4, 50256}, {6}}));
  EXPECT_EQ(shard.describe(), gpt2 + " (llm.c GPT-2 shard, 5 tokens, 3 documents)");
  const std::string llama3 = write_llmc<uint32_t>("llama3.bin", 20240801, 7, {128000, 70000, 128000, 1}, 4);
  EXPECT_EQ(documents(data::TokenFileDocuments(llama3, 128000)), (Docs{{128000}, {70000, 128000}, {1}}));
}

// With the model's vocabulary given, an id past it is an error as the file opens.
TEST_F(TokenFiles, AnIdPastTheVocabularyIsFoundAsTheFileOpens) {
  const std::string path = write("ids.bin", bytes_of(std::vector<uint16_t>{1, 9, 2, 9, 40, 3}));
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(path, 9, 32); }),
            path + ": token id 40 at token 4 (document 2) is outside the model's vocabulary of 32 (tokenized for "
                   "another model?)");
  EXPECT_EQ(data::TokenFileDocuments(path, 9, 41).num_documents(), 3);
}

TEST_F(TokenFiles, DamagedFilesAreErrorsNamingThem) {
  const std::string odd = write("odd.bin", "abc");
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(odd, std::nullopt); }),
            odd + ": 3 bytes, not a whole number of uint16 tokens (nanoGPT's train.bin and val.bin), nor an llm.c "
                  "data shard (its header starts with 20240520 or 20240801)");
  const std::string empty = write("empty.bin", "");
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(empty, std::nullopt); }), empty + ": holds no tokens");
  const std::string cut = write_llmc<uint16_t>("cut.bin", 20240520, 1, {1, 2, 3}, 4);
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(cut, std::nullopt); }),
            cut + ": its llm.c header says 4 tokens of 2 bytes, but 6 bytes follow it");
  // A header cut short is not read as nanoGPT's tokens.
  const std::string short_header = write("short.bin", bytes_of(std::vector<int32_t>{20240801, 7, 2, 0}));
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(short_header, std::nullopt); }),
            short_header + ": starts as an llm.c data shard (magic 20240801) but is 16 bytes, shorter than its "
                           "1024-byte header");
  const std::string version = write_llmc<uint16_t>("v2.bin", 20240520, 2, {1, 2}, 2);
  EXPECT_EQ(error_of([&] { data::TokenFileDocuments(version, std::nullopt); }),
            version + ": an llm.c data shard (magic 20240520) of version 2, where GPT-2's is 1");
}

}  // namespace
}  // namespace hone::test

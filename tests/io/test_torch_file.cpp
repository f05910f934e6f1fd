// PyTorch's torch.save archives (tests/reference/hf/*.pt, written by
// generate_hf.py with PyTorch 1.13): the tensors hone reads, the ones it
// cannot, the pickles it refuses, and damaged archives.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hone/io/torch_file.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

std::string fixture(const std::string& name) { return source_path("tests/reference/hf/" + name); }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::span<const std::byte> span_of(const std::string& bytes) {
  return {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
}

template <typename T>
std::vector<T> values(const TensorFile::Entry& e) {
  std::vector<T> v(e.bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), e.bytes.data(), e.bytes.size());
  return v;
}

// The message parsing `bytes` (an archive in memory) fails with.
std::string parse_error(const std::string& bytes) {
  return error_of([&] { TorchFile::parse(span_of(bytes), "damaged.pt"); });
}

// A zip archive of `entries` stored as torch.save stores them (uncompressed).
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string zip, central;
  const auto le = [](std::string& out, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out += char((value >> (8 * i)) & 0xff);
  };
  for (const auto& [name, data] : entries) {
    const size_t offset = zip.size();
    le(zip, 0x04034b50, 4), le(zip, 20, 2), le(zip, 0, 2), le(zip, 0, 2), le(zip, 0, 4), le(zip, 0, 4);
    le(zip, data.size(), 4), le(zip, data.size(), 4), le(zip, name.size(), 2), le(zip, 0, 2);
    zip += name + data;
    le(central, 0x02014b50, 4), le(central, 20, 2), le(central, 20, 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 4), le(central, 0, 4), le(central, data.size(), 4), le(central, data.size(), 4);
    le(central, name.size(), 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 4), le(central, offset, 4);
    central += name;
  }
  const size_t central_at = zip.size();
  zip += central;
  le(zip, 0x06054b50, 4), le(zip, 0, 2), le(zip, 0, 2), le(zip, entries.size(), 2), le(zip, entries.size(), 2);
  le(zip, central.size(), 4), le(zip, central_at, 4), le(zip, 0, 2);
  return zip;
}

TEST(TorchFile, ReadsTheTensorsOfAStateDict) {
  const TorchFile f(fixture("tensors.pt"));
  // In the dict's order; the one value that is not a tensor ("step": 7) is not listed.
  EXPECT_EQ(f.names(), (std::vector<std::string>{"f32", "row", "bf16", "f16", "i64", "scalar", "empty", "strided",
                                                 "flags"}));
  const auto& base = f.entry("f32");
  EXPECT_EQ(base.dtype, DType::f32);
  EXPECT_EQ(base.shape, (Shape{3, 4}));
  const std::vector<float> all = values<float>(base);
  // A view into the same storage at an offset (row 1 of the 3 × 4 matrix).
  const auto& row = f.entry("row");
  EXPECT_EQ(row.shape, Shape{4});
  EXPECT_EQ(row.bytes.data(), base.bytes.data() + 4 * sizeof(float));
  // bf16 and f16 copies, rounded to nearest even as hone rounds.
  const auto& b = f.entry("bf16");
  EXPECT_EQ(b.dtype, DType::bf16);
  const std::vector<bf16> rounded = values<bf16>(b);
  ASSERT_EQ(rounded.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(rounded[i].bits, float_to_bf16(all[i]).bits) << i;
  EXPECT_EQ(f.entry("f16").dtype, DType::f16);
  EXPECT_EQ(f.entry("f16").bytes.size(), 12u * 2);
  EXPECT_EQ(values<int64_t>(f.entry("i64")), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(f.entry("scalar").shape, Shape{});
  EXPECT_EQ(values<float>(f.entry("scalar")), std::vector<float>{2.5f});
  EXPECT_EQ(f.entry("empty").shape, (Shape{0, 4}));
  EXPECT_TRUE(f.entry("empty").bytes.empty());
  // Listed, but not readable: each error names the file, the tensor and why.
  EXPECT_TRUE(f.contains("strided"));
  EXPECT_NE(error_of([&] { f.entry("strided"); })
                .find(fixture("tensors.pt") + ": tensor 'strided' is a strided view (sizes [4, 3], strides [1, 4])"),
            std::string::npos)
      << error_of([&] { f.entry("strided"); });
  EXPECT_NE(error_of([&] { f.entry("flags"); }).find("'flags' is stored as torch.BoolStorage, which hone has no dtype"),
            std::string::npos);
  EXPECT_FALSE(f.contains("step"));
  EXPECT_NE(error_of([&] { f.entry("step"); }).find("no tensor named 'step'"), std::string::npos);
  // The value that is plain data.
  EXPECT_EQ(f.values(), nlohmann::ordered_json({{"step", 7}}));
}

// A training checkpoint (nanoGPT's ckpt.pt): the state dicts nested in its dict
// are named by their keys joined with dots, its plain data kept as JSON.
TEST(TorchFile, NamesTheTensorsOfNestedDictsAndKeepsThePlainData) {
  const TorchFile f(fixture("nanogpt_bias.pt"));
  EXPECT_EQ(f.entry("model.transformer.wte.weight").shape, (Shape{40, 16}));
  // The optimizer's state is keyed by parameter index; best_val_loss is a 0-d tensor.
  EXPECT_EQ(f.entry("optimizer.state.0.exp_avg").shape, (Shape{40, 16}));
  EXPECT_EQ(values<float>(f.entry("optimizer.state.0.step")), std::vector<float>{5.0f});
  EXPECT_EQ(values<float>(f.entry("best_val_loss")), std::vector<float>{3.25f});
  const auto& v = f.values();
  EXPECT_EQ(v["model_args"],
            nlohmann::ordered_json({{"n_layer", 2}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 32}, {"bias", true},
                                    {"vocab_size", 40}, {"dropout", 0.1}}));
  EXPECT_EQ(v["iter_num"], 5);
  EXPECT_EQ(v["config"]["dataset"], "shakespeare_char");
  // Entries holding tensors are not plain data.
  EXPECT_FALSE(v.contains("model") || v.contains("optimizer") || v.contains("best_val_loss"));
}

// A dict holding itself (through the memo), and dicts nested 100 deep: errors,
// not a walk without end or a stack overflow.
TEST(TorchFile, DictsHoldingThemselvesOrNestedDeepAreErrors) {
  const std::string itself = std::string("\x80\x02}q\x00X\x01\x00\x00\x00" "ah\x00s.", 15);
  EXPECT_NE(parse_error(stored_zip({{"self/data.pkl", itself}})).find("damaged.pt: its dict holds no tensors"),
            std::string::npos)
      << parse_error(stored_zip({{"self/data.pkl", itself}}));
  std::string deep = "\x80\x02}";
  for (int i = 0; i < 99; ++i) deep += std::string("X\x01\x00\x00\x00k}", 7);
  deep += std::string(99, 's') + ".";
  EXPECT_NE(parse_error(stored_zip({{"deep/data.pkl", deep}})).find("damaged.pt: dicts nested more than 64 deep"),
            std::string::npos)
      << parse_error(stored_zip({{"deep/data.pkl", deep}}));
  // A key of 5000 bytes over a dict: refused (reused through the memo, each tensor's name was a copy).
  const std::string long_key = std::string("\x80\x02}X\x88\x13\x00\x00", 8) + std::string(5000, 'k') + "}s.";
  EXPECT_NE(parse_error(stored_zip({{"key/data.pkl", long_key}}))
                .find("damaged.pt: a dict key of 5000 bytes names tensors (at most 4096)"),
            std::string::npos)
      << parse_error(stored_zip({{"key/data.pkl", long_key}}));
}

TEST(TorchFile, RefusesPicklesThatCallAnythingButTensorConstructors) {
  // The archive's pickle calls os.system("echo this ran"): read as data, refused, never run.
  const std::string error = error_of([&] { TorchFile f(fixture("runs_a_command.pt")); });
  EXPECT_NE(error.find("runs_a_command/data.pkl (offset "), std::string::npos) << error;
  EXPECT_NE(error.find("the pickle calls posix.system: hone reads tensors and the dicts that hold them"),
            std::string::npos)
      << error;
}

// Lists nested 300000 deep (each APPENDed to the one below it): an error, as
// any pickle that is no state dict; they were freed by a recursion that
// overflowed the stack (a segmentation fault).
TEST(TorchFile, ADeepNestIsAnErrorNotACrash) {
  const size_t depth = 300000;
  const std::string pickle = "\x80\x02" + std::string(depth, ']') + std::string(depth - 1, 'a') + ".";
  EXPECT_NE(parse_error(stored_zip({{"deep/data.pkl", pickle}})).find("damaged.pt: holds no dict of tensors"),
            std::string::npos);
}

TEST(TorchFile, NamesTheLegacyFormat) {
  EXPECT_NE(error_of([&] { TorchFile f(fixture("legacy.pt")); })
                .find(fixture("legacy.pt") + ": PyTorch's legacy format (torch.save before 1.6"),
            std::string::npos);
}

TEST(TorchFile, DamagedArchivesAreErrorsNamingWhatIsWrong) {
  const std::string good = read_bytes(fixture("tensors.pt"));
  ASSERT_NO_THROW(TorchFile::parse(span_of(good), "good.pt"));
  // Cut short: the end record is gone.
  EXPECT_NE(parse_error(good.substr(0, good.size() / 2)).find("damaged.pt: not a zip archive"), std::string::npos);
  // The central directory's first entry says it is deflated (method 8).
  std::string deflated = good;
  const size_t central = deflated.find("PK\1\2");
  ASSERT_NE(central, std::string::npos);
  deflated[central + 10] = 8;
  EXPECT_NE(parse_error(deflated).find("is compressed (method 8); torch.save stores its entries uncompressed"),
            std::string::npos);
  // A storage's data record renamed away.
  std::string missing = good;
  const size_t record = missing.rfind("tensors/data/0");
  ASSERT_NE(record, std::string::npos);
  missing[record + 13] = 'x';
  EXPECT_NE(parse_error(missing).find("storage 0 is not in the archive (tensors/data/0 is missing)"),
            std::string::npos)
      << parse_error(missing);
  // An opcode torch.save never writes, where the pickle's first GLOBAL was.
  std::string opcode = good;
  const size_t global = opcode.find("\x80\x02" "c");
  ASSERT_NE(global, std::string::npos);
  opcode[global + 2] = '\xff';
  EXPECT_NE(parse_error(opcode).find("damaged.pt: tensors/data.pkl (offset 2): opcode 0xff is not one hone reads "
                                     "(dicts, lists, tuples, strings, numbers and torch.save's tensors)"),
            std::string::npos)
      << parse_error(opcode);
}

}  // namespace
}  // namespace hone::test

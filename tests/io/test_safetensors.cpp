// safetensors: round trips, the exact byte layout, and every way a header can lie.
#include <filesystem>
#include <fstream>

#include "hone/io/safetensors.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hone_st_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with the given header text and data bytes.
  std::string raw_file(const std::string& header, size_t data_bytes) {
    std::string p = path("raw.safetensors");
    std::ofstream out(p, std::ios::binary);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(data_bytes, '\0');
    return p;
  }

  void expect_error(const std::string& p, const std::string& fragment) {
    try {
      SafetensorsFile f(p);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "the error must name the file: " << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripKeepsDtypesShapesValuesAndMetadata) {
  Tensor a = random_tensor({3, 4}, DType::f32, 1), b = random_tensor({5}, DType::bf16, 2);
  Tensor c = Tensor::from(std::vector<int32_t>{1, 2, 3}, {3}), d = random_tensor({2, 1, 2}, DType::f64, 3);
  Tensor empty = Tensor::empty({0, 4}, DType::f32);
  const std::string p = path("x.safetensors");
  write_safetensors(p, {{"a", a}, {"b", b}, {"c", c}, {"d", d}, {"empty", empty}}, {{"format", "pt"}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c", "d", "empty"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.load("a").to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(f.load("b").dtype(), DType::bf16);
  EXPECT_EQ(f.load("b").to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(f.load("c").to_vector<int32_t>(), c.to_vector<int32_t>());
  EXPECT_EQ(f.load("d").shape(), Shape({2, 1, 2}));
  EXPECT_EQ(f.load("empty").shape(), Shape({0, 4}));
  EXPECT_THROW(f.load("missing"), Error);
  // Nothing but the file itself is left in the folder.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, LayoutIsTheHuggingFaceFormat) {
  const std::string p = path("y.safetensors");
  write_safetensors(p, {{"w", Tensor::from(std::vector<float>{1.5f, -2.0f}, {2})}});
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // data section 8-byte aligned
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  float v[2];
  std::memcpy(v, bytes.data() + 8 + n, 8);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(bytes.size(), 8 + n + 8);
}

TEST_F(SafetensorsTest, RejectsLyingHeaders) {
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "reach past");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16), "need 16");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        16),
               "overlaps");
  expect_error(raw_file(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), "unsupported");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative");
  expect_error(raw_file(R"({"w":{"dtype":"F32"}})", 8), "expected");
  expect_error(raw_file(R"({not json)", 8), "is not valid JSON (byte 11: parse error at line 1, column 3");
  expect_error(raw_file(R"([])", 0), "is not a JSON object");
  expect_error(raw_file("{\"\xff\":{}}", 0), "is not valid JSON (byte 11: parse error at line 1, column 3: syntax error while parsing object key - "
               "invalid string: ill-formed UTF-8 byte");
  // The reference reader's rules: the tensors fill the data section, one after another.
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "end before they begin");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("v":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                        12),
               "data bytes 4 to 8 before tensor 'v' belong to no tensor");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6),
               "the last 2 data bytes (from 4) belong to no tensor");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                        4),
               "names tensor 'w' twice");
  expect_error(raw_file(std::string(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})") + std::string(6, '\0'),
                        4),
               "holds a NUL byte at offset 62");
  // Padding with spaces, as Hugging Face's writer does, is fine.
  EXPECT_NO_THROW(SafetensorsFile(raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  )", 4)));
  // A header length beyond the end of the file.
  const std::string p = path("short.safetensors");
  {
    std::ofstream out(p, std::ios::binary);
    uint64_t n = 1000;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  expect_error(p, "exceeds the file size");
  expect_error(path("absent.safetensors"), "cannot open");
}

}  // namespace
}  // namespace hone::test

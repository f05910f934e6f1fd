// TensorBoard event files: CRC-32C, record framing and the Event encoding.
#include <filesystem>

#include "hone/train/tensorboard.hpp"
#include "run_hone.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(TensorBoard, ScalarEventIsTheEventProtobuf) {
  const std::string e = tensorboard_scalar_event("loss", 5, 2.0, 1.5);
  // wall_time (field 1, double), step (field 2, varint), summary (field 5) {
  //   value (field 1) { tag (field 1) = "loss", simple_value (field 2, float) = 2 } }
  const std::string expected = std::string("\x09", 1) + std::string("\x00\x00\x00\x00\x00\x00\xf8\x3f", 8) +
                               std::string("\x10\x05", 2) + std::string("\x2a\x0d\x0a\x0b\x0a\x04loss\x15", 11) +
                               std::string("\x00\x00\x00\x40", 4);
  EXPECT_EQ(e, expected);
}

TEST(TensorBoard, FileIsAValidRecordStream) {
  const std::string dir = testing::TempDir() + "hone_tb_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir);
    w.scalar("a", 1, 0.5, 10.0);
    w.scalar("b", 2, -1.0, 11.0);
    path = w.path();
  }
  EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
  const std::string bytes = read_file(path);
  size_t pos = 0;
  int records = 0;
  while (pos < bytes.size()) {
    ASSERT_LE(pos + 12, bytes.size());
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, bytes.data() + pos, 8);
    std::memcpy(&length_crc, bytes.data() + pos + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(bytes.substr(pos, 8)));
    ASSERT_LE(pos + 12 + length + 4, bytes.size());
    const std::string data = bytes.substr(pos + 12, length);
    std::memcpy(&data_crc, bytes.data() + pos + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data));
    if (records == 0) {
      EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
    }
    pos += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 3);  // the file version, then two scalars
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hone::test

#pragma once
// TensorBoard event files, written directly: TFRecord framing (length, masked
// CRC32C of the length, an Event protobuf, masked CRC32C of it) around Event
// messages that hold scalar summaries. No TensorFlow or protobuf library needed.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace hone {

// CRC-32C (Castagnoli), the checksum TFRecord uses.
uint32_t crc32c(std::string_view data);
// TFRecord's masking of a CRC stored next to the data it covers.
uint32_t masked_crc32c(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates events.out.tfevents.<time>.<host>.<pid> in `dir`.
  explicit TensorBoardWriter(const std::string& dir);
  void scalar(std::string_view tag, int64_t step, double value, double wall_time);
  // TensorBoard hides the events of `step` and later that earlier files hold
  // (a SessionLog START event: a run resumed from an earlier checkpoint).
  void purge_from(int64_t step);
  // A write that failed (a full disk) is an error naming the file.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

// The serialized Event protobuf of one scalar (exposed for tests).
std::string tensorboard_scalar_event(std::string_view tag, int64_t step, double value, double wall_time);

}  // namespace hone

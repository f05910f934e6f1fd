#include "hone/train/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"

namespace hone {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli polynomial
    table[i] = c;
  }
  return table;
}

// Protocol buffer wire format, just what Event and Summary need.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(v | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void tag(std::string& out, int field, int wire_type) { varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }

template <typename T>
void fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void bytes_field(std::string& out, int field, std::string_view data) {
  tag(out, field, 2);
  varint(out, data.size());
  out.append(data);
}

std::string event_header(int64_t step, double wall_time) {
  std::string e;
  tag(e, 1, 1);  // Event.wall_time: double
  fixed(e, wall_time);
  tag(e, 2, 0);  // Event.step: int64
  varint(e, uint64_t(step));
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) crc = table[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tensorboard_scalar_event(std::string_view name, int64_t step, double value, double wall_time) {
  std::string summary_value;
  bytes_field(summary_value, 1, name);  // Summary.Value.tag
  tag(summary_value, 2, 5);             // Summary.Value.simple_value: float
  fixed(summary_value, float(value));
  std::string summary;
  bytes_field(summary, 1, summary_value);  // Summary.value
  std::string event = event_header(step, wall_time);
  bytes_field(event, 5, summary);  // Event.summary
  return event;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}.{}", int64_t(now_seconds()), host, ::getpid()))
              .string();
  out_.open(path_, std::ios::binary);
  HONE_CHECK(out_.good(), "{}: cannot create", path_);
  std::string version = event_header(0, now_seconds());
  bytes_field(version, 3, "brain.Event:2");  // Event.file_version
  write_record(version);
  out_.flush();
}

void TensorBoardWriter::flush() { flush_or_fail(out_, path_); }

void TensorBoardWriter::write_record(const std::string& event) {
  std::string length;
  fixed(length, uint64_t(event.size()));
  out_.write(length.data(), 8);
  const uint32_t length_crc = masked_crc32c(length), data_crc = masked_crc32c(event);
  out_.write(reinterpret_cast<const char*>(&length_crc), 4);
  out_.write(event.data(), std::streamsize(event.size()));
  out_.write(reinterpret_cast<const char*>(&data_crc), 4);
}

void TensorBoardWriter::purge_from(int64_t step) {
  std::string event = event_header(step, now_seconds());
  std::string session_log;
  tag(session_log, 1, 0);  // SessionLog.status
  varint(session_log, 1);  // START
  bytes_field(event, 7, session_log);  // Event.session_log
  write_record(event);
  flush();
}

void TensorBoardWriter::scalar(std::string_view name, int64_t step, double value, double wall_time) {
  write_record(tensorboard_scalar_event(name, step, value, wall_time));
}

}  // namespace hone

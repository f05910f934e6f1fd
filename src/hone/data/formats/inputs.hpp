#pragma once
// Text inputs of `hone preprocess`: JSONL (one object per line, selected string
// keys) and plain text files (one document per file), from files or folders,
// gzip- or zstd-compressed or not, and the string columns of Parquet files and
// MDS folders. JSONL is streamed (only its current line is held), Parquet a row
// group at a time.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hone::data {

// A byte stream that decompresses gzip (also multi-member) or zstd (also
// multi-frame) when the data starts with their magic bytes, whatever the name.
// Corrupt or truncated compressed data is an error naming the file and offset.
class InputStream {
 public:
  // A line, or a whole text, longer than this is an error: a few bytes of
  // compressed data can decode to gigabytes without a line break.
  static constexpr size_t kMaxRecordBytes = size_t(1) << 30;

  explicit InputStream(const std::string& path, size_t max_record_bytes = kMaxRecordBytes);
  // Reads an open stream it does not own (e.g. fmemopen() over a buffer).
  InputStream(std::FILE* file, std::string name, size_t max_record_bytes = kMaxRecordBytes);
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // The next line without its "\n" (or "\r\n"); false at the end of the data.
  bool read_line(std::string& line);
  // Everything not read yet.
  std::string read_all();
  const std::string& name() const { return name_; }
  // The bytes of the file read so far (compressed ones, as stored), for progress.
  uint64_t bytes_read() const;

 private:
  struct Decoder;
  bool fill();  // more decoded bytes into out_; false at the end

  // An error unless `bytes` (of a line or a text so far) are within the limit;
  // `what` and `why` say what it is and what may be wrong.
  void check_record_size(size_t bytes, const char* what, const char* why) const;

  std::string name_;
  size_t max_record_bytes_;
  std::FILE* file_ = nullptr;
  bool owns_file_ = false;
  std::unique_ptr<Decoder> decoder_;
  std::vector<char> out_;
  size_t out_pos_ = 0, out_end_ = 0;
};

// The string values of `keys` in one JSONL line; `where` ("file:line") prefixes errors.
void parse_jsonl_line(std::string_view line, std::span<const std::string> keys, std::string_view where,
                      std::vector<std::string>& values);

struct TextDocument {
  std::string origin;               // "file:line" for JSONL, the path for a text file, "file: row N", ...
  std::vector<std::string> fields;  // one per key
};

// Whether a file name, less a .gz/.zst/.zstd suffix, ends in .jsonl, .json or
// .ndjson: a file of JSON records.
bool is_jsonl_name(std::string name);
// Whether a file name, less a .gz/.zst/.zstd suffix, ends in .txt or .text.
bool is_text_name(std::string name);

// Each input as it is, or, where it names nothing that exists and has glob
// characters (* ? [), the paths matching it in name order (Megatron's
// --partitions mode globs --input; hone takes patterns always). A pattern that
// matches nothing is an error.
std::vector<std::string> expand_patterns(const std::vector<std::string>& inputs);

// Each file and the input that named it (itself, a folder, a pattern): a file
// named twice (a pattern's match given again, the same path spelt two ways)
// would be read twice, an error naming it and both inputs.
void check_each_file_once(const std::vector<std::pair<std::string, std::string>>& files_and_inputs);

// Whether `path` is a folder of MDS shards (index.json and shard files).
bool is_mds_folder(const std::string& path);
// Whether `path` names a Parquet file (.parquet).
bool is_parquet_name(const std::string& path);

// The documents of a dataset whose records are read whole: an MDS folder of
// text (LLM Foundry's shards of a `text` column, which it tokenizes on the fly;
// the keys name `str` columns every shard has) or a Parquet file (Hugging Face
// datasets; the keys name string columns). One document per sample or row, in
// order, its fields the keys' values.
class RecordTextReader {
 public:
  virtual ~RecordTextReader() = default;
  virtual bool next(TextDocument& document) = 0;
};
// The reader of `path`, an MDS folder or a Parquet file.
std::unique_ptr<RecordTextReader> open_record_text(const std::string& path, const std::vector<std::string>& keys);

// Documents from files, folders and glob patterns (expand_patterns), in order:
// the inputs as given, each folder's data files sorted by path (JSONL, text and
// Parquet names, and names without an extension: wiki_00, part-00000; hidden
// files and others, a README.md or a .bin/.idx, left out). A file is JSONL when its name, less a .gz/.zst/.zstd
// suffix, ends in .jsonl, .json or .ndjson, or when it is not named as text
// (.txt, .text) and its first character that is not white space opens a JSON
// object (Megatron's .loose_json, WikiExtractor's wiki_00): as Megatron reads
// every input. Any other file is one plain text document, which needs exactly
// one key, and a NUL byte in it is an error (a binary or a compressed file hone
// does not read). Blank JSONL lines are skipped. Parquet files, and a folder given as an input that holds MDS shards
// (it stays one entry of files()), are read by open_record_text; MDS shards
// inside a folder given as input are an error, since their files are not text.
// A file two inputs name is an error (check_each_file_once).
class DocumentReader {
 public:
  DocumentReader(std::span<const std::string> inputs, std::vector<std::string> keys);
  ~DocumentReader();

  bool next(TextDocument& document);
  // As next, but a JSONL line is left in `line`, unparsed (is_jsonl_line set):
  // parse_jsonl_line(line, keys, document.origin, document.fields) completes it.
  // hone preprocess reads under a lock and parses in its workers, since parsing
  // would otherwise take a quarter of a worker's time and cap the speed-up near 4x.
  bool next_unparsed(TextDocument& document, std::string& line, bool& is_jsonl_line);
  const std::vector<std::string>& files() const { return files_; }
  size_t file() const { return next_file_; }  // 1-based index of the file being read
  // The files' bytes as stored, in all and read so far, for progress; the total
  // is 0 where it is not known (a pipe, an MDS folder among the inputs).
  uint64_t bytes_total() const { return bytes_total_; }
  uint64_t bytes_read() const;

 private:
  std::vector<std::string> keys_, files_;
  std::vector<uint64_t> bytes_before_;  // of the files before each, as stored
  uint64_t bytes_total_ = 0;
  size_t next_file_ = 0;
  std::unique_ptr<InputStream> jsonl_;  // the JSONL file being read
  std::unique_ptr<RecordTextReader> records_;  // the MDS folder or Parquet file being read
  uint64_t line_ = 0;
  std::string text_;  // next's JSONL line
};

}  // namespace hone::data

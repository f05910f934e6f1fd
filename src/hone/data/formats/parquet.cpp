#include "hone/data/formats/parquet.hpp"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include <fmt/ranges.h>

#include "hone/core/error.hpp"
#include "hone/data/formats/mapped_file.hpp"

namespace hone::data {

using Json = nlohmann::ordered_json;

namespace {

// ---- Thrift's compact protocol (the footer and the page headers) ----

class ThriftReader {
 public:
  ThriftReader(std::span<const std::byte> data, std::string where) : data_(data), where_(std::move(where)) {}
  size_t position() const { return pos_; }

  uint8_t byte() {
    HONE_CHECK(pos_ < data_.size(), "{}: Thrift data ends at byte {}", where_, pos_);
    return uint8_t(data_[pos_++]);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = byte();
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: a Thrift varint longer than 10 bytes at byte {}", where_, pos_);
  }
  int64_t zigzag() {
    const uint64_t v = varint();
    return int64_t(v >> 1) ^ -int64_t(v & 1);
  }
  std::string binary() {
    const uint64_t n = varint();
    HONE_CHECK(n <= data_.size() - pos_, "{}: a Thrift string of {} bytes at byte {} runs past the end", where_, n,
               pos_);
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  // Calls field(id, type) for each field of a struct; `field` reads or skips it.
  void read_struct(const std::function<void(int16_t id, uint8_t type)>& field) {
    int16_t last = 0;
    while (true) {
      const uint8_t header = byte();
      const uint8_t type = header & 0x0f;
      if (type == 0) return;  // stop
      const int16_t id = (header >> 4) ? int16_t(last + (header >> 4)) : int16_t(zigzag());
      last = id;
      field(id, type);
    }
  }
  // A list's element type and size.
  std::pair<uint8_t, uint64_t> list_header() {
    const uint8_t header = byte();
    const uint64_t size = (header >> 4) == 15 ? varint() : uint64_t(header >> 4);
    return {uint8_t(header & 0x0f), size};
  }
  bool boolean(uint8_t type) { return type == 1; }  // a struct field's value is in its type
  void skip(uint8_t type, int depth = 0) {
    HONE_CHECK(depth < 64, "{}: Thrift data nested too deeply", where_);
    switch (type) {
      case 1: case 2: return;                    // booleans
      case 3: byte(); return;                    // byte
      case 4: case 5: case 6: varint(); return;  // i16, i32, i64
      case 7: advance(8); return;                // double
      case 8: binary(); return;
      case 9: case 10: {                         // list, set
        const auto [element, size] = list_header();
        for (uint64_t i = 0; i < size; ++i) skip_element(element, depth + 1);
        return;
      }
      case 11: {  // map
        const uint64_t size = varint();
        if (size == 0) return;
        const uint8_t types = byte();
        for (uint64_t i = 0; i < size; ++i) {
          skip_element(types >> 4, depth + 1);
          skip_element(types & 0x0f, depth + 1);
        }
        return;
      }
      case 12: read_struct([&](int16_t, uint8_t t) { skip(t, depth + 1); }); return;
    }
    fail("{}: unknown Thrift type {} at byte {}", where_, type, pos_);
  }
  void skip_element(uint8_t type, int depth) {
    if (type == 1 || type == 2) byte();  // booleans in lists take a byte
    else skip(type, depth);
  }
  template <typename T>
  std::vector<T> list(const std::function<T()>& element) {
    const auto [type, size] = list_header();
    (void)type;
    HONE_CHECK(size <= data_.size(), "{}: a Thrift list of {} elements", where_, size);
    std::vector<T> out;
    for (uint64_t i = 0; i < size; ++i) out.push_back(element());
    return out;
  }

 private:
  void advance(size_t n) {
    HONE_CHECK(n <= data_.size() - pos_, "{}: Thrift data ends at byte {}", where_, pos_);
    pos_ += n;
  }
  std::span<const std::byte> data_;
  std::string where_;
  size_t pos_ = 0;
};

// ---- the schema ----

enum Physical { boolean = 0, int32 = 1, int64 = 2, int96 = 3, float32 = 4, float64 = 5, byte_array = 6, fixed = 7 };
enum Repetition { required = 0, optional = 1, repeated = 2 };

struct SchemaElement {
  int type = -1;  // physical; -1 for groups
  int repetition = required;
  std::string name;
  int children = 0;
  int converted = -1;  // converted_type: 3 LIST
  bool list = false;   // converted type or logical type LIST
};

struct Node {
  SchemaElement e;
  std::vector<Node> children;
  int def = 0, rep = 0;  // levels at this node (counting itself)
  int leaf = -1;         // index among the leaves (primitive nodes)
};

SchemaElement read_schema_element(ThriftReader& t) {
  SchemaElement e;
  t.read_struct([&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: e.type = int(t.zigzag()); break;
      case 3: e.repetition = int(t.zigzag()); break;
      case 4: e.name = t.binary(); break;
      case 5: e.children = int(t.zigzag()); break;
      case 6:
        e.converted = int(t.zigzag());
        e.list = e.list || e.converted == 3;
        break;
      case 10:  // LogicalType: a union; field 3 is LIST
        t.read_struct([&](int16_t kind, uint8_t kind_type) {
          if (kind == 3) e.list = true;
          t.skip(kind_type);
        });
        break;
      default: t.skip(type);
    }
  });
  return e;
}

// Builds the tree from the flattened list (depth first), with each node's levels.
void build(Node& node, const std::vector<SchemaElement>& flat, size_t& next, int& leaves, const std::string& where) {
  for (int i = 0; i < node.e.children; ++i) {
    HONE_CHECK(next < flat.size(), "{}: the schema ends inside group '{}'", where, node.e.name);
    Node child{flat[next++]};
    child.def = node.def + (child.e.repetition != required ? 1 : 0);
    child.rep = node.rep + (child.e.repetition == repeated ? 1 : 0);
    if (child.e.children == 0) {
      HONE_CHECK(child.e.type >= 0, "{}: column '{}' has neither a type nor children", where, child.e.name);
      child.leaf = leaves++;
    }
    build(child, flat, next, leaves, where);
    node.children.push_back(std::move(child));
  }
}

// Why hone does not read a column of this shape and these types, or "" when it
// does: primitives of the types hone decodes, structs of such columns, and lists
// in the three-level form (group LIST { repeated group list { element } }) of
// such elements, nested to any depth.
std::string unreadable(const Node& n) {
  if (n.e.repetition == repeated) {
    return fmt::format("'{}' is a repeated field outside a LIST (a legacy list)", n.e.name);
  }
  if (n.leaf >= 0) {
    const bool decoded = n.e.type == boolean || n.e.type == int32 || n.e.type == int64 || n.e.type == float32 ||
                         n.e.type == float64 || n.e.type == byte_array;
    return decoded ? "" : fmt::format("'{}' has physical type {} (timestamps, fixed-size bytes)", n.e.name, n.e.type);
  }
  if (n.e.list) {
    if (n.children.size() != 1 || n.children[0].e.repetition != repeated || n.children[0].children.size() != 1) {
      return fmt::format(
          "'{}' is a list not in the three-level form (group LIST {{ repeated group list {{ element }} }})", n.e.name);
    }
    const Node& element = n.children[0].children[0];
    return unreadable(element);
  }
  if (n.children.empty()) return fmt::format("'{}' is a group without fields", n.e.name);
  for (const Node& field : n.children)
    if (std::string why = unreadable(field); !why.empty()) return why;
  return "";
}

// ---- column chunks ----

struct Chunk {
  int type = -1, codec = 0;
  int64_t values = 0, data_offset = -1, dictionary_offset = -1, compressed_size = 0;
  std::vector<std::string> path;
};

struct Levels {
  std::vector<int> def, rep;  // one per value slot
  std::vector<Json> values;   // the non-null values, in order
};

uint64_t read_bits(const uint8_t* p, uint64_t bit, int width) {
  uint64_t v = 0;
  for (int b = 0; b < width; ++b, ++bit) v |= uint64_t((p[bit >> 3] >> (bit & 7)) & 1) << b;
  return v;
}

// The RLE / bit-packed hybrid: `count` values of `width` bits from data.
std::vector<uint32_t> decode_hybrid(std::span<const std::byte> data, int width, size_t count, const std::string& where) {
  std::vector<uint32_t> out;
  out.reserve(std::min(count, data.size() * 64));
  size_t pos = 0;
  const size_t value_bytes = size_t(width + 7) / 8;
  while (out.size() < count) {
    HONE_CHECK(pos < data.size(), "{}: RLE data ends after {} of {} values", where, out.size(), count);
    ThriftReader r(data.subspan(pos), where);  // its varint() is ULEB128, as the run headers are
    const uint64_t header = r.varint();
    pos += r.position();
    if (header & 1) {  // bit-packed groups of 8
      const uint64_t n = (header >> 1) * 8;
      const uint64_t bytes = (header >> 1) * uint64_t(width);
      HONE_CHECK(bytes <= data.size() - pos, "{}: a bit-packed run of {} values runs past the end", where, n);
      const auto* p = reinterpret_cast<const uint8_t*>(data.data() + pos);
      for (uint64_t i = 0; i < n && out.size() < count; ++i) out.push_back(uint32_t(read_bits(p, i * width, width)));
      pos += bytes;
    } else {
      const uint64_t n = header >> 1;
      HONE_CHECK(value_bytes <= data.size() - pos, "{}: an RLE run runs past the end", where);
      uint32_t v = 0;
      std::memcpy(&v, data.data() + pos, value_bytes);
      pos += value_bytes;
      HONE_CHECK(n <= count - out.size(), "{}: an RLE run of {} values where {} remain", where, n, count - out.size());
      out.insert(out.end(), n, v);
    }
  }
  return out;
}

int bit_width(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) ++w;
  return w;
}

// DELTA_BINARY_PACKED integers, at most `limit` of them; `pos` advances past them.
std::vector<int64_t> decode_delta(std::span<const std::byte> data, size_t& pos, size_t limit, const std::string& where) {
  ThriftReader r(data.subspan(pos), where);
  const uint64_t block = r.varint(), miniblocks = r.varint(), total = r.varint();
  int64_t value = r.zigzag();
  HONE_CHECK(miniblocks > 0 && block % miniblocks == 0 && (block / miniblocks) % 8 == 0 && total <= limit,
             "{}: a DELTA_BINARY_PACKED header of blocks of {} in {} miniblocks, {} values", where, block, miniblocks,
             total);
  const uint64_t per_miniblock = block / miniblocks;
  std::vector<int64_t> out;
  if (total > 0) out.push_back(value);
  size_t at = pos + r.position();
  while (out.size() < total) {
    ThriftReader header(data.subspan(at), where);
    const int64_t min_delta = header.zigzag();
    at += header.position();
    HONE_CHECK(miniblocks <= data.size() - at, "{}: a delta block's bit widths run past the end", where);
    const auto* widths = reinterpret_cast<const uint8_t*>(data.data() + at);
    at += miniblocks;
    for (uint64_t m = 0; m < miniblocks && out.size() < total; ++m) {
      const int width = widths[m];
      HONE_CHECK(width <= 64, "{}: a delta miniblock of {} bits", where, width);
      const uint64_t bytes = per_miniblock * uint64_t(width) / 8;
      HONE_CHECK(bytes <= data.size() - at, "{}: a delta miniblock runs past the end", where);
      const auto* p = reinterpret_cast<const uint8_t*>(data.data() + at);
      for (uint64_t i = 0; i < per_miniblock && out.size() < total; ++i) {
        // Deltas add with wraparound (two's complement), as Parquet's writers computed them.
        value = int64_t(uint64_t(value) + uint64_t(min_delta) + read_bits(p, i * uint64_t(width), width));
        out.push_back(value);
      }
      at += bytes;
    }
  }
  pos = at;
  return out;
}

// `count` PLAIN values of `type`; `pos` advances past them.
std::vector<Json> decode_plain(std::span<const std::byte> data, size_t& pos, int type, size_t count,
                               const std::string& where) {
  std::vector<Json> out;
  out.reserve(std::min(count, data.size() * 8));  // a value takes a bit at least
  const auto need = [&](size_t n) {
    HONE_CHECK(n <= data.size() - pos, "{}: PLAIN values end after {} of {}", where, out.size(), count);
  };
  for (size_t i = 0; i < count; ++i) {
    switch (type) {
      case boolean:
        need(i / 8 + 1);
        out.push_back(bool((uint8_t(data[pos + i / 8]) >> (i % 8)) & 1));
        if (i + 1 == count) pos += (count + 7) / 8;
        break;
      case int32: need(4); out.push_back(load_le<int32_t>(data.data() + pos)); pos += 4; break;
      case int64: need(8); out.push_back(load_le<int64_t>(data.data() + pos)); pos += 8; break;
      case float32: need(4); out.push_back(double(load_le<float>(data.data() + pos))); pos += 4; break;
      case float64: need(8); out.push_back(load_le<double>(data.data() + pos)); pos += 8; break;
      case byte_array: {
        need(4);
        const uint32_t n = load_le<uint32_t>(data.data() + pos);
        pos += 4;
        need(n);
        out.push_back(std::string(reinterpret_cast<const char*>(data.data() + pos), n));
        pos += n;
        break;
      }
      default: fail("{}: values of physical type {} are not read by hone (timestamps, fixed-size bytes)", where, type);
    }
  }
  return out;
}

std::vector<std::byte> decompress(std::span<const std::byte> data, int codec, size_t size, const std::string& where) {
  switch (codec) {
    case 0:
      HONE_CHECK(data.size() == size, "{}: an uncompressed page of {} bytes, its header says {}", where, data.size(),
                 size);
      return {data.begin(), data.end()};
    case 1: return snappy_decompress(data, size, where);
    case 2: {
      std::vector<std::byte> out(size);
      z_stream z{};
      HONE_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, "{}: cannot start gzip decoding", where);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data.data()));
      z.avail_in = uInt(data.size());
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = uInt(size);
      const int status = inflate(&z, Z_FINISH);
      const size_t got = size - z.avail_out;
      inflateEnd(&z);
      HONE_CHECK(status == Z_STREAM_END && got == size, "{}: corrupt gzip page ({} of {} bytes)", where, got, size);
      return out;
    }
    case 6: {
      std::vector<std::byte> out(size);
      const size_t got = ZSTD_decompress(out.data(), size, data.data(), data.size());
      HONE_CHECK(!ZSTD_isError(got) && got == size, "{}: corrupt zstd page", where);
      return out;
    }
  }
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  fail("{}: pages compressed with {}, which hone does not read (it reads SNAPPY, GZIP and ZSTD)", where,
       codec >= 0 && codec < 8 ? names[codec] : "an unknown codec");
}

// Every level and value of one column chunk of a row group of `rows`.
Levels read_chunk(std::span<const std::byte> file, const Chunk& c, const Node& leaf, int64_t rows,
                  const std::string& where) {
  // A column outside lists has a value slot per row; one inside, any number (bounded against damage).
  HONE_CHECK(leaf.rep > 0 ? c.values >= 0 && c.values <= (int64_t(1) << 26) : c.values == rows,
             "{}: {} values in a row group of {} rows", where, c.values, rows);
  Levels out;
  std::vector<Json> dictionary;
  int64_t start = c.dictionary_offset >= 0 && c.dictionary_offset < c.data_offset ? c.dictionary_offset : c.data_offset;
  HONE_CHECK(start >= 0 && uint64_t(start) <= file.size() && uint64_t(c.compressed_size) <= file.size() - uint64_t(start),
             "{}: the chunk at byte {} ({} bytes) lies outside the file", where, start, c.compressed_size);
  const auto chunk = file.subspan(size_t(start), size_t(c.compressed_size));
  size_t pos = 0;
  while (int64_t(out.def.size()) < c.values) {
    HONE_CHECK(pos < chunk.size(), "{}: the chunk ends after {} of {} values", where, out.def.size(), c.values);
    ThriftReader t(chunk.subspan(pos), where + " page header");
    int type = -1;
    int64_t uncompressed = -1, compressed = -1, count = 0, encoding = 0, def_bytes = 0, rep_bytes = 0;
    bool v2_compressed = true;
    t.read_struct([&](int16_t id, uint8_t ft) {
      switch (id) {
        case 1: type = int(t.zigzag()); break;
        case 2: uncompressed = t.zigzag(); break;
        case 3: compressed = t.zigzag(); break;
        case 5: case 7: case 8:  // data page, dictionary page, data page v2 headers
          t.read_struct([&](int16_t f, uint8_t ftype) {
            if (f == 1) count = t.zigzag();
            else if ((id != 8 && f == 2) || (id == 8 && f == 4)) encoding = t.zigzag();
            else if (id == 8 && f == 5) def_bytes = t.zigzag();
            else if (id == 8 && f == 6) rep_bytes = t.zigzag();
            else if (id == 8 && f == 7) v2_compressed = t.boolean(ftype);
            else t.skip(ftype);
          });
          break;
        default: t.skip(ft);
      }
    });
    pos += t.position();
    HONE_CHECK(compressed >= 0 && uint64_t(compressed) <= chunk.size() - pos && count >= 0,
               "{}: a page of {} bytes at byte {} of the chunk lies outside it", where, compressed, pos);
    // Sizes are 32-bit in the format; a page of more than 1 GiB is damage.
    HONE_CHECK(uncompressed >= 0 && uncompressed <= (int64_t(1) << 30), "{}: a page of {} bytes uncompressed", where,
               uncompressed);
    const auto stored = chunk.subspan(pos, size_t(compressed));
    pos += size_t(compressed);
    if (type != 0 && type != 2 && type != 3) continue;  // index pages
    const std::string page = fmt::format("{} (page at byte {})", where, start + int64_t(pos - size_t(compressed)));
    HONE_CHECK(type == 2 || count <= c.values - int64_t(out.def.size()), "{}: {} values where the chunk has {} left",
               page, count, c.values - int64_t(out.def.size()));
    if (type == 2) {
      const auto bytes = decompress(stored, c.codec, size_t(uncompressed), page);
      size_t at = 0;
      dictionary = decode_plain(bytes, at, c.type, size_t(count), page);
      continue;
    }
    // Levels: v1 pages hold them (length-prefixed) inside the compressed data;
    // v2 pages before it, uncompressed.
    std::vector<std::byte> bytes;
    size_t at = 0;
    std::span<const std::byte> rep_data, def_data;
    if (type == 0) {
      bytes = decompress(stored, c.codec, size_t(uncompressed), page);
      for (auto [max, data] : {std::pair{leaf.rep, &rep_data}, std::pair{leaf.def, &def_data}}) {
        if (max == 0) continue;
        HONE_CHECK(at + 4 <= bytes.size(), "{}: the levels' length runs past the page", page);
        const uint32_t n = load_le<uint32_t>(bytes.data() + at);
        HONE_CHECK(n <= bytes.size() - at - 4, "{}: levels of {} bytes run past the page", page, n);
        *data = std::span<const std::byte>(bytes).subspan(at + 4, n);
        at += 4 + n;
      }
    } else {
      HONE_CHECK(rep_bytes >= 0 && def_bytes >= 0 && uint64_t(rep_bytes + def_bytes) <= stored.size() &&
                     rep_bytes + def_bytes <= uncompressed,
                 "{}: levels of {} and {} bytes in a page of {}", page, rep_bytes, def_bytes, stored.size());
      rep_data = stored.subspan(0, size_t(rep_bytes));
      def_data = stored.subspan(size_t(rep_bytes), size_t(def_bytes));
      const auto values = stored.subspan(size_t(rep_bytes + def_bytes));
      const size_t values_size = size_t(uncompressed - rep_bytes - def_bytes);
      bytes = v2_compressed ? decompress(values, c.codec, values_size, page)
                            : std::vector<std::byte>(values.begin(), values.end());
    }
    const size_t n = size_t(count);
    const auto levels = [&](std::span<const std::byte> data, int max) {
      return max == 0 ? std::vector<uint32_t>(n, 0) : decode_hybrid(data, bit_width(max), n, page);
    };
    const std::vector<uint32_t> rep = levels(rep_data, leaf.rep), def = levels(def_data, leaf.def);
    const size_t present = size_t(std::count(def.begin(), def.end(), uint32_t(leaf.def)));
    for (size_t i = 0; i < n; ++i) {
      HONE_CHECK(int(def[i]) <= leaf.def && int(rep[i]) <= leaf.rep, "{}: level {} beyond the column's {}", page,
                 def[i], leaf.def);
      out.def.push_back(int(def[i]));
      out.rep.push_back(int(rep[i]));
    }
    const std::span<const std::byte> data(bytes);
    switch (encoding) {
      case 0: {  // PLAIN
        auto v = decode_plain(data, at, c.type, present, page);
        out.values.insert(out.values.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
        break;
      }
      case 2: case 8: {  // PLAIN_DICTIONARY, RLE_DICTIONARY
        HONE_CHECK(at < data.size() || present == 0, "{}: dictionary indices missing", page);
        if (present == 0) break;
        const int width = int(uint8_t(data[at]));
        HONE_CHECK(width <= 32, "{}: dictionary indices of {} bits", page, width);
        for (uint32_t index : decode_hybrid(data.subspan(at + 1), width, present, page)) {
          HONE_CHECK(index < dictionary.size(), "{}: dictionary index {} of {} entries", page, index,
                     dictionary.size());
          out.values.push_back(dictionary[index]);
        }
        break;
      }
      case 3: {  // RLE: booleans, length-prefixed
        HONE_CHECK(c.type == boolean && at + 4 <= data.size(), "{}: RLE values of physical type {}", page, c.type);
        for (uint32_t b : decode_hybrid(data.subspan(at + 4), 1, present, page)) out.values.push_back(b != 0);
        break;
      }
      case 5: {  // DELTA_BINARY_PACKED
        HONE_CHECK(c.type == int32 || c.type == int64, "{}: DELTA_BINARY_PACKED values of physical type {}", page,
                   c.type);
        for (int64_t v : decode_delta(data, at, present, page)) out.values.push_back(v);
        break;
      }
      case 6: case 7: {  // DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY
        HONE_CHECK(c.type == byte_array, "{}: DELTA byte-array values of physical type {}", page, c.type);
        const std::vector<int64_t> prefixes = encoding == 7 ? decode_delta(data, at, present, page) : std::vector<int64_t>();
        const std::vector<int64_t> lengths = decode_delta(data, at, present, page);
        HONE_CHECK(encoding == 6 || prefixes.size() == lengths.size(), "{}: {} prefix lengths for {} suffixes", page,
                   prefixes.size(), lengths.size());
        std::string previous;
        for (size_t i = 0; i < lengths.size(); ++i) {
          const int64_t prefix = encoding == 7 ? prefixes[i] : 0;
          HONE_CHECK(lengths[i] >= 0 && uint64_t(lengths[i]) <= data.size() - at && prefix >= 0 &&
                         size_t(prefix) <= previous.size(),
                     "{}: DELTA byte array {} runs past the page", page, i);
          std::string value = previous.substr(0, size_t(prefix));
          value.append(reinterpret_cast<const char*>(data.data() + at), size_t(lengths[i]));
          at += size_t(lengths[i]);
          out.values.push_back(value);
          previous = std::move(value);
        }
        break;
      }
      default: fail("{}: values in encoding {}, which hone does not read", page, encoding);
    }
    const auto slots = size_t(std::count(out.def.begin(), out.def.end(), leaf.def));
    HONE_CHECK(out.values.size() == slots, "{}: {} values for {} slots", page, out.values.size(), slots);
  }
  return out;
}

}  // namespace

// ---- snappy ----

std::vector<std::byte> snappy_decompress(std::span<const std::byte> data, size_t size, const std::string& where) {
  ThriftReader header(data, where);
  const uint64_t declared = header.varint();
  HONE_CHECK(declared == size, "{}: a Snappy block of {} bytes, expected {}", where, declared, size);
  std::vector<std::byte> out;
  out.reserve(size);
  size_t pos = header.position();
  const auto need = [&](size_t n) { HONE_CHECK(n <= data.size() - pos, "{}: truncated Snappy data", where); };
  while (pos < data.size()) {
    const uint8_t tag = uint8_t(data[pos++]);
    size_t length = 0, offset = 0;
    switch (tag & 3) {
      case 0: {  // literal
        length = (tag >> 2) + 1;
        if (length > 60) {
          const size_t extra = length - 60;
          need(extra);
          length = 0;
          for (size_t i = 0; i < extra; ++i) length |= size_t(uint8_t(data[pos + i])) << (8 * i);
          length += 1;
          pos += extra;
        }
        need(length);
        HONE_CHECK(length <= size - out.size(), "{}: Snappy data longer than {} bytes", where, size);
        out.insert(out.end(), data.begin() + long(pos), data.begin() + long(pos + length));
        pos += length;
        continue;
      }
      case 1:
        need(1);
        length = ((tag >> 2) & 7) + 4;
        offset = (size_t(tag >> 5) << 8) | uint8_t(data[pos++]);
        break;
      case 2:
        need(2);
        length = (tag >> 2) + 1;
        offset = load_le<uint16_t>(data.data() + pos);
        pos += 2;
        break;
      default:
        need(4);
        length = (tag >> 2) + 1;
        offset = load_le<uint32_t>(data.data() + pos);
        pos += 4;
    }
    HONE_CHECK(offset > 0 && offset <= out.size() && length <= size - out.size(),
               "{}: a Snappy copy of {} bytes from {} back, after {} bytes", where, length, offset, out.size());
    for (size_t i = 0; i < length; ++i) out.push_back(out[out.size() - offset]);  // copies may overlap
  }
  HONE_CHECK(out.size() == size, "{}: Snappy data of {} bytes, expected {}", where, out.size(), size);
  return out;
}

// ---- the file ----

struct ParquetFile::Impl {
  std::string path;
  std::unique_ptr<MappedFile> mapped;
  std::vector<std::byte> owned;
  std::span<const std::byte> bytes;
  Node schema;
  std::vector<const Node*> leaves;
  int64_t rows = 0;
  struct Group {
    int64_t rows = 0;
    std::vector<Chunk> chunks;  // by leaf
  };
  std::vector<Group> groups;

  explicit Impl(std::string p) : path(std::move(p)), mapped(std::make_unique<MappedFile>(path)) {
    bytes = mapped->bytes();
  }
  Impl(std::vector<std::byte> b, std::string name) : path(std::move(name)), owned(std::move(b)), bytes(owned) {}

  void parse();

  const Node* column(const std::string& name) const {
    for (const Node& c : schema.children)
      if (c.e.name == name) return &c;
    return nullptr;
  }

  // The values of a top-level column in row group g, one per row (null where
  // missing): each leaf's values put in place by its repetition and definition
  // levels (Dremel's record assembly). A null struct field is left out of its
  // object; a null list element stays null.
  std::vector<Json> read_column(size_t g, const Node& top) const {
    const std::string where = fmt::format("{}: column '{}'", path, top.e.name);
    const std::string why = unreadable(top);
    HONE_CHECK(why.empty(), "{}: not read by hone: {}", where, why);
    std::vector<Json> rows(size_t(groups[g].rows));
    std::vector<const Node*> nodes;  // from the column down to the leaf being read
    const std::function<void(const Node&)> read_leaves = [&](const Node& n) {
      nodes.push_back(&n);
      if (n.leaf >= 0) place_leaf(g, nodes, rows, where);
      for (const Node& child : n.children) read_leaves(child);
      nodes.pop_back();
    };
    read_leaves(top);
    return rows;
  }

  // One leaf's values into `rows`, along `nodes` (the column's node down to the leaf).
  void place_leaf(size_t g, const std::vector<const Node*>& nodes, std::vector<Json>& rows,
                  const std::string& where) const {
    const Node& leaf = *nodes.back();
    const Levels l = read_chunk(bytes, groups[g].chunks[size_t(leaf.leaf)], leaf, groups[g].rows,
                                fmt::format("{}: row group {}, column '{}'", path, g, leaf.e.name));
    std::vector<size_t> index(nodes.size(), 0);  // the element each repeated node is at
    size_t row = size_t(-1), v = 0;
    for (size_t i = 0; i < l.def.size(); ++i) {
      const int r = l.rep[i], d = l.def[i];
      if (r == 0) ++row;
      HONE_CHECK(row < rows.size(), "{}: more rows than the row group's {}", where, rows.size());
      Json* slot = &rows[row];  // where the value of nodes[k] goes
      for (size_t k = 0; k < nodes.size(); ++k) {
        const Node& n = *nodes[k];
        if (n.e.repetition == repeated) {  // a list's repeated group: `slot` is the list
          if (d < n.def) break;  // an empty list
          if (n.rep >= r) index[k] = n.rep == r ? index[k] + 1 : 0;  // a new element; else the last one continues
          HONE_CHECK(index[k] <= slot->size(), "{}: the fields of a list's elements disagree on its length", where);
          if (index[k] == slot->size()) slot->push_back(Json());
          slot = &(*slot)[index[k]];
          continue;
        }
        if (d < n.def) break;  // null here
        if (n.leaf >= 0) {
          HONE_CHECK(v < l.values.size(), "{}: fewer values than its levels say", where);
          *slot = l.values[v++];
        } else if (n.e.list) {
          if (!slot->is_array()) *slot = Json::array();
        } else {
          if (!slot->is_object()) *slot = Json::object();
          const Node& field = *nodes[k + 1];
          if (d < field.def) break;  // a null field is left out
          slot = &(*slot)[field.e.name];
        }
      }
    }
    HONE_CHECK(row + 1 == rows.size(), "{}: {} rows of values for {} rows", where, row + 1, rows.size());
  }
};

ParquetFile::ParquetFile(std::string path) : impl_(std::make_unique<Impl>(std::move(path))) { impl_->parse(); }

ParquetFile::ParquetFile(std::vector<std::byte> bytes, std::string name)
    : impl_(std::make_unique<Impl>(std::move(bytes), std::move(name))) {
  impl_->parse();
}

void ParquetFile::Impl::parse() {
  Impl& m = *this;
  HONE_CHECK(bytes.size() >= 12 && std::memcmp(bytes.data(), "PAR1", 4) == 0 &&
                 std::memcmp(bytes.data() + bytes.size() - 4, "PAR1", 4) == 0,
             "{}: not a Parquet file (no PAR1 at its start and end)", m.path);
  const uint32_t footer = load_le<uint32_t>(bytes.data() + bytes.size() - 8);
  HONE_CHECK(footer <= bytes.size() - 12, "{}: a footer of {} bytes in a file of {}", m.path, footer, bytes.size());
  ThriftReader t(bytes.subspan(bytes.size() - 8 - footer, footer), m.path + ": footer");
  std::vector<SchemaElement> flat;
  t.read_struct([&](int16_t id, uint8_t type) {
    switch (id) {
      case 2: flat = t.list<SchemaElement>([&] { return read_schema_element(t); }); break;
      case 3: m.rows = t.zigzag(); break;
      case 4:
        m.groups = t.list<Impl::Group>([&] {
          Impl::Group g;
          t.read_struct([&](int16_t gid, uint8_t gtype) {
            if (gid == 3) {
              g.rows = t.zigzag();
            } else if (gid == 1) {
              g.chunks = t.list<Chunk>([&] {
                Chunk c;
                t.read_struct([&](int16_t cid, uint8_t ctype) {
                  if (cid == 1) fail("{}: a column chunk in another file ({}) is not read", m.path, t.binary());
                  if (cid != 3) return t.skip(ctype);
                  t.read_struct([&](int16_t f, uint8_t ftype) {
                    switch (f) {
                      case 1: c.type = int(t.zigzag()); break;
                      case 3: c.path = t.list<std::string>([&] { return t.binary(); }); break;
                      case 4: c.codec = int(t.zigzag()); break;
                      case 5: c.values = t.zigzag(); break;
                      case 7: c.compressed_size = t.zigzag(); break;
                      case 9: c.data_offset = t.zigzag(); break;
                      case 11: c.dictionary_offset = t.zigzag(); break;
                      default: t.skip(ftype);
                    }
                  });
                });
                return c;
              });
            } else {
              t.skip(gtype);
            }
          });
          return g;
        });
        break;
      default: t.skip(type);
    }
  });
  HONE_CHECK(!flat.empty(), "{}: the footer has no schema", m.path);
  m.schema.e = flat[0];
  size_t next = 1;
  int leaves = 0;
  build(m.schema, flat, next, leaves, m.path);
  HONE_CHECK(next == flat.size(), "{}: the schema has {} elements beyond its tree", m.path, flat.size() - next);
  std::function<void(const Node&)> collect = [&](const Node& n) {
    if (n.leaf >= 0) m.leaves.push_back(&n);
    for (const Node& c : n.children) collect(c);
  };
  collect(m.schema);
  int64_t total = 0;
  for (size_t g = 0; g < m.groups.size(); ++g) {
    HONE_CHECK(m.groups[g].chunks.size() == m.leaves.size(), "{}: row group {} has {} column chunks, the schema {}",
               m.path, g, m.groups[g].chunks.size(), m.leaves.size());
    for (size_t k = 0; k < m.leaves.size(); ++k)
      HONE_CHECK(m.groups[g].chunks[k].type == m.leaves[k]->e.type, "{}: row group {}: column {} has another type",
                 m.path, g, k);
    total += m.groups[g].rows;
  }
  HONE_CHECK(total == m.rows, "{}: row groups of {} rows, the footer says {}", m.path, total, m.rows);
}

ParquetFile::~ParquetFile() = default;

const std::string& ParquetFile::path() const { return impl_->path; }
int64_t ParquetFile::rows() const { return impl_->rows; }
size_t ParquetFile::row_groups() const { return impl_->groups.size(); }

std::vector<std::string> ParquetFile::column_names() const {
  std::vector<std::string> names;
  for (const Node& c : impl_->schema.children) names.push_back(c.e.name);
  return names;
}

std::vector<nlohmann::ordered_json> ParquetFile::read_rows(size_t g, const std::vector<std::string>& columns) const {
  const Impl& m = *impl_;
  HONE_CHECK(g < m.groups.size(), "{}: row group {} of {}", m.path, g, m.groups.size());
  std::vector<Json> rows(size_t(m.groups[g].rows), Json::object());
  const auto add = [&](const Node& column) {
    const std::vector<Json> values = m.read_column(g, column);
    for (size_t i = 0; i < rows.size(); ++i)
      if (!values[i].is_null()) rows[i][column.e.name] = values[i];
  };
  if (!columns.empty()) {
    for (const std::string& name : columns) {
      const Node* column = m.column(name);
      HONE_CHECK(column, "{}: no column '{}' (it has {})", m.path, name, fmt::join(column_names(), ", "));
      add(*column);
    }
    return rows;
  }
  for (const Node& column : m.schema.children)
    if (unreadable(column).empty()) add(column);  // others (timestamps, legacy lists) stay out of the records
  return rows;
}

}  // namespace hone::data

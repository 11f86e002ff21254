// safetensors reading and writing: header JSON encode/decode, strict validation of untrusted files,
// and the write-to-temporary-then-rename save.
#include "tapegrad/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {
namespace {

// ordered_json keeps keys in file order, so headers we write list dtype/shape/data_offsets like the
// reference writer. Reading uses the std::map-backed json instead: ordered_json finds a key by a
// linear search, which made a hostile header of 150,000 entries take 21 s to parse (quadratic);
// the header order that loading needs (to break ties between empty tensors) is recorded while
// parsing.
using Json = nlohmann::ordered_json;
using ReadJson = nlohmann::json;

// A header this large is not a real checkpoint; refusing it bounds what a hostile file makes us allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.cpp copies tensor bytes as they are and assumes a little-endian host"
#endif

struct DTypeCode {
  const char* code;
  DType dtype;
};
constexpr DTypeCode kDTypeCodes[] = {
    {"F32", kFloat32}, {"F64", kFloat64}, {"F16", kFloat16}, {"BF16", kBFloat16},
    {"I32", kInt32},   {"I64", kInt64},   {"BOOL", kBool},
};

const char* dtype_code(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes)
    if (c.dtype == dtype) return c.code;
  TG_ASSERT(false, "no safetensors code for dtype ", dtype);
  return "";
}

// One tensor as the header describes it, after validation.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
  size_t header_index;  // position among the header's keys, to keep empty tensors in order
};

struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // sorted by data offset
  uint64_t data_start = 0;     // file offset of the data section
};

// ---- Reading --------------------------------------------------------------------------------------

class Reader {
 public:
  Reader(const std::string& path, const char* op) : path_(path), op_(op) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) fail("cannot open file (", std::strerror(errno), ")");
    if (S_ISDIR(st.st_mode)) fail("is a directory, not a safetensors file");
    if (!S_ISREG(st.st_mode)) fail("is not a regular file");
    in_.open(path, std::ios::binary);
    if (!in_) fail("cannot open file (", std::strerror(errno), ")");
    in_.seekg(0, std::ios::end);
    std::streamoff size = in_.tellg();
    if (size < 0) fail("cannot determine the file size");
    size_ = static_cast<uint64_t>(size);
  }

  uint64_t size() const { return size_; }

  // Reads exactly n bytes at `offset`; callers have checked that they lie inside the file.
  void read(uint64_t offset, void* out, uint64_t n) {
    if (n == 0) return;
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    if (!in_ || static_cast<uint64_t>(in_.gcount()) != n) fail("read failed at byte ", offset);
  }

  template <class... Args>
  [[noreturn]] void fail(const Args&... parts) const {
    detail::throw_error(detail::str_cat(op_, ": ", path_, ": ", parts...));
  }

 private:
  std::string path_;
  const char* op_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

// A non-negative JSON integer as uint64, or a failure naming `what`. Rejects floats such as 2.0:
// the spec's shapes and offsets are integers, and a float is a sign of a malformed writer.
uint64_t as_unsigned(const Reader& r, const ReadJson& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) r.fail(what, " is negative (", v.get<int64_t>(), ")");
  r.fail(what, " must be a non-negative integer, got ", v.dump());
}

Entry parse_entry(const Reader& r, const std::string& name, const ReadJson& v, size_t index) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object()) r.fail(where, ": entry must be an object, got ", v.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) r.fail(where, ": entry lacks '", field, "'");
  Entry e;
  e.name = name;
  e.header_index = index;

  const Json& dtype = v["dtype"];
  if (!dtype.is_string()) r.fail(where, ": dtype must be a string");
  const std::string& code = dtype.get_ref<const std::string&>();
  bool known = false;
  for (const DTypeCode& c : kDTypeCodes)
    if (code == c.code) e.dtype = c.dtype, known = true;
  if (!known) r.fail(where, ": unsupported dtype '", code, "' (supported: F32, F64, F16, BF16, I32, I64, BOOL)");

  const Json& shape = v["shape"];
  if (!shape.is_array()) r.fail(where, ": shape must be an array");
  // Multiplying in uint64 with an overflow check: a hostile shape must not wrap to a small size.
  uint64_t numel = 1;
  bool overflow = false, has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t d = as_unsigned(r, shape[i], where + ": shape[" + std::to_string(i) + "]");
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      r.fail(where, ": shape[", i, "] = ", d, " is too large");
    e.shape.push_back(static_cast<int64_t>(d));
    if (d == 0) {
      has_zero = true;
    } else if (!overflow) {
      if (numel > std::numeric_limits<uint64_t>::max() / d)
        overflow = true;
      else
        numel *= d;
    }
  }
  if (has_zero) numel = 0, overflow = false;  // a zero dim makes the tensor empty whatever the others are

  const Json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) r.fail(where, ": data_offsets must be an array [begin, end]");
  e.begin = as_unsigned(r, offsets[0], where + ": data_offsets[0]");
  e.end = as_unsigned(r, offsets[1], where + ": data_offsets[1]");
  if (e.begin > e.end) r.fail(where, ": data_offsets begin ", e.begin, " > end ", e.end);

  uint64_t itemsize = dtype_size(e.dtype);
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / itemsize)
    r.fail(where, ": shape ", shape.dump(), " is too large");
  if (numel * itemsize != e.end - e.begin)
    r.fail(where, ": size mismatch: shape ", shape_str(e.shape), " of ", code, " needs ", numel * itemsize,
           " bytes but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

// The parsed header and the position of each top-level key in the text.
struct ParsedHeader {
  ReadJson json;
  std::map<std::string, size_t> key_order;
};

// A SAX pass that builds nothing: it records the order of the top-level keys and finds the first
// key repeated within any object. (nlohmann's parse callback cannot do this cheaply: after each
// nested object it scans the whole parent for discarded values, quadratic in the entry count.)
// Sets, not hashes: crafted keys cannot make them collide.
class KeyScan : public nlohmann::json_sax<ReadJson> {
 public:
  std::map<std::string, size_t> key_order;
  std::string duplicate;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!open_.back().insert(key).second && duplicate.empty()) duplicate = key;
    if (open_.size() == 1) key_order.emplace(key, key_order.size());
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::vector<std::set<std::string>> open_;  // the keys of each object being read
};

// Parses the JSON text, rejecting duplicate keys in any object: nlohmann would silently keep one
// of them, and a checkpoint with two different "weight"s is ambiguous. Both passes take n log n
// time in the number of entries.
ParsedHeader parse_json(const Reader& r, const std::string& text) {
  ParsedHeader out;
  try {
    out.json = ReadJson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    r.fail("header is not valid JSON: ", e.what());
  }
  KeyScan scan;
  if (!ReadJson::sax_parse(text, &scan)) r.fail("header is not valid JSON");
  if (!scan.duplicate.empty()) r.fail("duplicate key '", scan.duplicate, "' in header");
  out.key_order = std::move(scan.key_order);
  return out;
}

Header read_header(Reader& r) {
  if (r.size() < 8) r.fail("file is truncated: ", r.size(), " bytes, shorter than the 8-byte header length");
  unsigned char len_bytes[8];
  r.read(0, len_bytes, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes) r.fail("header length ", n, " is larger than the ", kMaxHeaderBytes, "-byte limit");
  if (n > r.size() - 8) r.fail("header length ", n, " runs past the end of the file (", r.size(), " bytes)");

  std::string text(n, '\0');
  r.read(8, text.data(), n);
  ParsedHeader parsed = parse_json(r, text);
  const ReadJson& j = parsed.json;
  if (!j.is_object()) r.fail("header must be a JSON object, got ", j.type_name());

  Header h;
  h.data_start = 8 + n;
  h.entries.reserve(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) r.fail("__metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) r.fail("__metadata__ value for '", m.key(), "' must be a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto order = parsed.key_order.find(it.key());
    TG_ASSERT(order != parsed.key_order.end(), "safetensors: key '", it.key(), "' was not seen while parsing");
    h.entries.push_back(parse_entry(r, it.key(), it.value(), order->second));
  }

  // The spec requires the entries to tile the data section exactly: no overlaps, holes or tail.
  // Ties (empty tensors sharing an offset) keep the header's order.
  std::sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.header_index < b.header_index;
  });
  const uint64_t data_size = r.size() - h.data_start;
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : h.entries) {
    if (e.end > data_size)
      r.fail("tensor '", e.name, "': data_offsets [", e.begin, ", ", e.end, "] run past the data section (", data_size,
             " bytes)");
    if (e.begin < covered)
      r.fail("tensors '", previous->name, "' and '", e.name, "' overlap (byte ", e.begin, " < ", covered, ")");
    if (e.begin > covered) r.fail("hole in the data section: bytes [", covered, ", ", e.begin, ") belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) r.fail("data section has ", data_size, " bytes but the tensors cover only ", covered);
  return h;
}

// ---- Writing --------------------------------------------------------------------------------------

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Validate and gather the bytes first, so a bad argument never leaves a temporary file behind.
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  std::set<std::string> names;
  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TG_CHECK(!name.empty(), "save_safetensors: tensor names must not be empty");
    TG_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    TG_CHECK(names.insert(name).second, "save_safetensors: duplicate tensor name '", name, "'");
    TG_CHECK(tensor.defined(), "save_safetensors: tensor '", name, "' is undefined");
    Tensor t = tensor.detach().cpu().contiguous();
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.itemsize();
    Json entry = Json::object();
    entry["dtype"] = dtype_code(t.dtype());
    entry["shape"] = t.sizes();
    entry["data_offsets"] = {offset, offset + nbytes};
    header[name] = std::move(entry);
    offset += nbytes;
    host.push_back(std::move(t));
  }
  // Compact JSON padded with spaces to a multiple of 8, as the reference writer does, which keeps
  // the data section 8-byte aligned for readers that map the file.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  // Through a temporary file renamed into place (Note [atomic output files] in io/atomic_file.h):
  // a crash or a failed write leaves the previous checkpoint, and a symlinked path is written through.
  detail::AtomicFileWriter w("save_safetensors", path);
  w.write(len_bytes, 8);
  w.write(text.data(), text.size());
  for (const Tensor& t : host) w.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.itemsize());
  w.commit();
}

SafetensorsDict load_safetensors(const std::string& path, Device device) {
  Reader r(path, "load_safetensors");
  Header h = read_header(r);
  StateDict out;
  out.reserve(h.entries.size());
  for (const Entry& e : h.entries) {
    // Safe to allocate now: the entry's size was checked against the bytes actually in the file.
    Tensor t = empty(e.shape, e.dtype);
    r.read(h.data_start + e.begin, t.data_ptr(), e.end - e.begin);
    if (e.dtype == kBool) {
      // A byte other than 0/1 is not a valid C++ bool; normalise like numpy's astype(bool).
      auto* bytes = static_cast<unsigned char*>(t.data_ptr());
      for (uint64_t i = 0; i < e.end - e.begin; ++i) bytes[i] = bytes[i] != 0;
    }
    out.emplace_back(e.name, device.is_cpu() ? t : t.to(device));
  }
  return SafetensorsDict(std::move(out), path);
}

const Tensor* SafetensorsDict::find(const std::string& name) const {
  for (const auto& entry : *this)
    if (entry.first == name) return &entry.second;
  return nullptr;
}

Tensor* SafetensorsDict::find(const std::string& name) {
  return const_cast<Tensor*>(static_cast<const SafetensorsDict&>(*this).find(name));
}

const Tensor& SafetensorsDict::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  // Name a few of the keys that are there: enough to spot a prefix mismatch ("model." vs none).
  constexpr size_t kShown = 8;
  std::string shown;
  for (size_t i = 0; i < size() && i < kShown; ++i) shown += (i ? ", '" : "'") + (*this)[i].first + "'";
  if (size() > kShown) shown += ", ...";
  detail::throw_error(detail::str_cat("load_safetensors: no tensor named '", name, "' in '", path_, "' (it holds ",
                                      size(), size() == 1 ? " tensor" : " tensors", size() ? ": " : "", shown, ")"));
}

Tensor& SafetensorsDict::at(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const SafetensorsDict&>(*this).at(name));
}

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  Reader r(path, "load_safetensors_metadata");
  return read_header(r).metadata;
}

}  // namespace tapegrad

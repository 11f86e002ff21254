// TextCorpus: files -> records -> deterministic train/validation split -> vocabulary -> token ids.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <sstream>

#include "data/utf8.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/generator.h"
#include "tapegrad/data/text.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool only_whitespace(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "TextCorpus: cannot open '", path, "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TG_CHECK(!in.bad(), "TextCorpus: error while reading '", path, "'");
  return text;
}

int64_t count_symbols(const std::string& text, TokenLevel level) {
  if (level == TokenLevel::Byte) return int64_t(text.size());
  // Continuation bytes (10xxxxxx) do not start a code point; the text is valid UTF-8 here.
  return int64_t(std::count_if(text.begin(), text.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }));
}

std::string describe(const std::vector<std::string>& files) {
  std::ostringstream out;
  for (size_t i = 0; i < files.size() && i < 3; ++i) out << (i ? ", " : "") << "'" << files[i] << "'";
  if (files.size() > 3) out << " and " << files.size() - 3 << " more files";
  return out.str();
}

}  // namespace

std::vector<std::string> split_records(std::string_view text, const std::string& separator) {
  auto without_final_newline = [](std::string_view piece) {
    if (!piece.empty() && piece.back() == '\n') piece.remove_suffix(1);
    return std::string(piece);
  };
  std::vector<std::string> records;
  if (text.empty()) return records;
  if (separator.empty()) return {without_final_newline(text)};
  size_t record_start = 0, line_start = 0;
  while (line_start < text.size()) {
    size_t newline = text.find('\n', line_start);
    size_t line_end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(line_start, line_end - line_start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    if (line == separator) {
      // The newline before the separator line ends the separator, not the record.
      records.emplace_back(line_start > record_start ? text.substr(record_start, line_start - 1 - record_start)
                                                     : std::string_view());
      record_start = next;
    }
    line_start = next;
  }
  if (record_start < text.size()) records.push_back(without_final_newline(text.substr(record_start)));
  return records;
}

std::vector<std::string> list_text_files(const std::vector<std::string>& paths) {
  TG_CHECK(!paths.empty(), "TextCorpus: no path given");
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    fs::file_status status = fs::status(path, ec);
    TG_CHECK(fs::exists(status), "TextCorpus: no such file or directory: '", path, "'");
    if (!fs::is_directory(status)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
      std::string name = entry.path().filename().string();
      // Symlinks are skipped: fortune directories hold "name.u8 -> name" links to the same text.
      if (!entry.is_symlink() && entry.is_regular_file() && name[0] != '.' && !ends_with(name, ".dat"))
        found.push_back(entry.path().string());
    }
    TG_CHECK(!ec, "TextCorpus: cannot list directory '", path, "': ", ec.message());
    TG_CHECK(!found.empty(), "TextCorpus: directory '", path, "' holds no text files ",
             "(regular files other than hidden ones and *.dat)");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

struct TextCorpus::Built {
  TextCorpusOptions options;
  std::vector<std::string> files;
  Vocab vocab;
  TextDataset train, valid;
  std::vector<int64_t> train_indices, valid_indices;
  int64_t num_symbols = 0, num_skipped = 0, valid_unknown = 0;
};

TextCorpus::TextCorpus(const std::vector<std::string>& paths, const TextCorpusOptions& options)
    : TextCorpus(build(paths, options)) {}

TextCorpus::TextCorpus(Built&& b)
    : options_(std::move(b.options)),
      files_(std::move(b.files)),
      vocab_(std::move(b.vocab)),
      train_(std::move(b.train)),
      valid_(std::move(b.valid)),
      train_indices_(std::move(b.train_indices)),
      valid_indices_(std::move(b.valid_indices)),
      num_symbols_(b.num_symbols),
      num_skipped_(b.num_skipped),
      valid_unknown_(b.valid_unknown) {}

TextCorpus::Built TextCorpus::build(const std::vector<std::string>& paths, const TextCorpusOptions& given) {
  TextCorpusOptions options = given;
  TG_CHECK(options.valid_fraction >= 0.0 && options.valid_fraction < 1.0,
           "TextCorpus: valid_fraction must be in [0, 1), got ", options.valid_fraction);
  TG_CHECK(options.min_freq >= 1, "TextCorpus: min_freq must be at least 1, got ", options.min_freq);
  TG_CHECK(options.max_symbols >= 0, "TextCorpus: max_symbols must be >= 0 (0: no limit), got ", options.max_symbols);
  options.collate.pad_id = Vocab::kPadId;
  std::vector<std::string> files = list_text_files(paths);

  // Records of every file, in file order; lengths are checked before anything is encoded.
  std::vector<std::string> texts;
  int64_t num_symbols = 0, num_skipped = 0;
  int64_t specials = int64_t(options.add_bos) + int64_t(options.add_eos);
  for (const std::string& file : files) {
    std::string content = read_file(file);
    if (options.level == TokenLevel::Char) {
      size_t bad = detail::utf8_first_invalid(content);
      TG_CHECK(bad == std::string::npos, "TextCorpus: '", file, "' is not valid UTF-8: bad byte 0x", std::hex,
               int(uint8_t(content[bad])), std::dec, " at byte offset ", bad,
               " (use TokenLevel::Byte to read any bytes)");
    }
    for (std::string& record : split_records(content, options.separator)) {
      if (only_whitespace(record)) continue;
      int64_t n = count_symbols(record, options.level);
      if ((options.max_symbols > 0 && n > options.max_symbols) || n + specials < 2) {
        ++num_skipped;
        continue;
      }
      num_symbols += n;
      texts.push_back(std::move(record));
    }
  }
  TG_CHECK(!texts.empty(), "TextCorpus: no non-empty records in ", describe(files), " (separator line '",
           options.separator, "'", num_skipped ? ", some records too long for max_symbols or too short" : "", ")");

  // The split: the first floor(fraction * n) entries of a seeded permutation are held out.
  int64_t n = int64_t(texts.size());
  int64_t n_valid = int64_t(options.valid_fraction * double(n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (n_valid > 0) {
    Generator generator(options.seed);
    std::vector<double> u = rand({n}, kFloat64, &generator).tolist<double>();
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order[size_t(i)], order[size_t(std::min<int64_t>(i, int64_t(u[size_t(i)] * double(i + 1))))]);
  }
  std::vector<int64_t> valid_indices(order.begin(), order.begin() + n_valid),
      train_indices(order.begin() + n_valid, order.end());
  std::sort(valid_indices.begin(), valid_indices.end());
  std::sort(train_indices.begin(), train_indices.end());

  std::vector<std::string> train_texts;
  for (int64_t i : train_indices) train_texts.push_back(texts[size_t(i)]);
  std::optional<Vocab> vocab;
  try {
    vocab.emplace(Vocab::build(train_texts, options.level, options.min_freq));
  } catch (const Error& e) {
    detail::throw_error(detail::str_cat("TextCorpus (", describe(files), "): ", e.what()));
  }
  train_texts.clear();

  auto encode = [&](const std::vector<int64_t>& indices, int64_t* unknown) {
    std::vector<std::vector<int64_t>> records;
    records.reserve(indices.size());
    for (int64_t i : indices) {
      std::vector<int64_t> ids;
      if (options.add_bos) ids.push_back(Vocab::kBosId);
      std::vector<int64_t> body = vocab->encode(texts[size_t(i)]);
      if (unknown) *unknown += int64_t(std::count(body.begin(), body.end(), Vocab::kUnkId));
      ids.insert(ids.end(), body.begin(), body.end());
      if (options.add_eos) ids.push_back(Vocab::kEosId);
      records.push_back(std::move(ids));
    }
    return records;
  };
  int64_t valid_unknown = 0;
  TextDataset train(encode(train_indices, nullptr), options.collate);
  TextDataset valid(encode(valid_indices, &valid_unknown), options.collate);
  return Built{
      std::move(options),       std::move(files),         std::move(*vocab), std::move(train), std::move(valid),
      std::move(train_indices), std::move(valid_indices), num_symbols,       num_skipped,      valid_unknown};
}

}  // namespace tapegrad

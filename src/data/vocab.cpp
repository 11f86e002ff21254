// Vocab: building from counts, encoding/decoding (UTF-8 or bytes) and the state-dict form.
#include "tapegrad/data/vocab.h"

#include <algorithm>
#include <map>

#include "data/utf8.h"
#include "tapegrad/core/error.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {
namespace {

const char* level_name(TokenLevel level) {
  return level == TokenLevel::Char ? "char" : "byte";
}

bool valid_symbol(TokenLevel level, int64_t s) {
  return level == TokenLevel::Char ? detail::is_unicode_scalar(s) : (s >= 0 && s <= 255);
}

// Calls f(symbol) for every token of `text`; returns the byte offset of invalid UTF-8 (Char), or npos.
template <class F>
size_t for_each_symbol(std::string_view text, TokenLevel level, F&& f) {
  if (level == TokenLevel::Byte) {
    for (char c : text) f(int64_t(static_cast<uint8_t>(c)));
    return std::string_view::npos;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t at = pos;
    int64_t cp = detail::utf8_next(text, pos);
    if (cp < 0) return at;
    f(cp);
  }
  return std::string_view::npos;
}

}  // namespace

Vocab::Vocab(TokenLevel level, std::vector<int64_t> symbols)
    : level_(level), symbols_(std::move(symbols)), small_ids_(256, kUnkId) {
  TG_CHECK(!symbols_.empty(), "Vocab: empty vocabulary (no symbols besides the ", kNumSpecials, " specials)");
  for (size_t i = 0; i < symbols_.size(); ++i) {
    int64_t s = symbols_[i], id = kNumSpecials + int64_t(i);
    TG_CHECK(valid_symbol(level_, s), "Vocab: symbol ", s, " at id ", id, " is not a valid ", level_name(level_),
             " symbol (", level_ == TokenLevel::Char ? "a Unicode scalar value" : "a byte value 0..255", ")");
    bool fresh = s < 256 ? small_ids_[size_t(s)] == kUnkId : large_ids_.count(s) == 0;
    TG_CHECK(fresh, "Vocab: symbol ", s, " appears twice (at id ", this->id(s), " and ", id, ")");
    if (s < 256)
      small_ids_[size_t(s)] = id;
    else
      large_ids_.emplace(s, id);
  }
}

Vocab Vocab::build(const std::vector<std::string>& texts, TokenLevel level, int64_t min_freq) {
  TG_CHECK(min_freq >= 1, "Vocab::build: min_freq must be at least 1, got ", min_freq);
  std::vector<int64_t> small(256, 0);
  std::map<int64_t, int64_t> large;
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t bad = for_each_symbol(texts[i], level, [&](int64_t s) {
      if (s < 256)
        ++small[size_t(s)];
      else
        ++large[s];
    });
    TG_CHECK(bad == std::string_view::npos, "Vocab::build: text ", i, " is not valid UTF-8 at byte offset ", bad);
  }
  std::vector<std::pair<int64_t, int64_t>> counts;  // (symbol, count)
  for (int64_t s = 0; s < 256; ++s)
    if (small[size_t(s)] >= min_freq) counts.emplace_back(s, small[size_t(s)]);
  for (const auto& [s, n] : large)
    if (n >= min_freq) counts.emplace_back(s, n);
  TG_CHECK(!counts.empty(), "Vocab::build: empty vocabulary: no symbol of the ", texts.size(),
           " texts occurs at least min_freq = ", min_freq, " times");
  // torchtext's order: by descending frequency, then by symbol.
  std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<int64_t> symbols;
  for (const auto& c : counts) symbols.push_back(c.first);
  return Vocab(level, std::move(symbols));
}

int64_t Vocab::id(int64_t symbol) const {
  if (symbol >= 0 && symbol < 256) return small_ids_[size_t(symbol)];
  auto it = large_ids_.find(symbol);
  return it == large_ids_.end() ? kUnkId : it->second;
}

int64_t Vocab::symbol(int64_t id) const {
  TG_CHECK(id >= kNumSpecials && id < size(), "Vocab::symbol: id ", id, " is not a symbol id (those are ", kNumSpecials,
           "..", size() - 1, "; 0..3 are the specials)");
  return symbols_[size_t(id - kNumSpecials)];
}

std::vector<int64_t> Vocab::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  size_t bad = for_each_symbol(text, level_, [&](int64_t s) { ids.push_back(id(s)); });
  TG_CHECK(bad == std::string_view::npos, "Vocab::encode: invalid UTF-8 at byte offset ", bad, " (byte 0x", std::hex,
           int(static_cast<uint8_t>(text[bad])), ")");
  return ids;
}

std::string Vocab::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t i : ids) {
    TG_CHECK(i >= 0 && i < size(), "Vocab::decode: id ", i, " is outside [0, ", size(), ")");
    if (i == kPadId || i == kBosId || i == kEosId) continue;
    if (i == kUnkId) {
      detail::utf8_append(out, 0xFFFD);
    } else if (level_ == TokenLevel::Char) {
      detail::utf8_append(out, symbols_[size_t(i - kNumSpecials)]);
    } else {
      out.push_back(char(static_cast<uint8_t>(symbols_[size_t(i - kNumSpecials)])));
    }
  }
  return out;
}

StateDict Vocab::state_dict(const std::string& prefix) const {
  std::vector<int64_t> values;
  for (int64_t id = 0; id < kNumSpecials; ++id) values.push_back(-1 - id);
  values.insert(values.end(), symbols_.begin(), symbols_.end());
  return {{prefix + "symbols", tensor<int64_t>(values)},
          {prefix + "level", tensor<int64_t>({level_ == TokenLevel::Char ? 0 : 1})}};
}

Vocab Vocab::from_state_dict(const StateDict& dict, const std::string& prefix) {
  auto find = [&](const std::string& key) {
    for (const auto& [name, t] : dict)
      if (name == key) {
        TG_CHECK(t.defined() && t.dtype() == kInt64 && t.dim() == 1, "Vocab::from_state_dict: '", key,
                 "' must be a 1-D int64 tensor, got ", t.defined() ? shape_str(t.sizes()) : "an undefined tensor",
                 t.defined() ? " " : "", t.defined() ? dtype_name(t.dtype()) : "");
        return t.to(kCPU).tolist<int64_t>();
      }
    detail::throw_error(
        detail::str_cat("Vocab::from_state_dict: no entry '", key, "' (", dict.size(), " entries given)"));
  };
  std::vector<int64_t> level = find(prefix + "level"), values = find(prefix + "symbols");
  TG_CHECK(level.size() == 1 && (level[0] == 0 || level[0] == 1), "Vocab::from_state_dict: '", prefix,
           "level' must hold one value, 0 (char) or 1 (byte)");
  TG_CHECK(int64_t(values.size()) > kNumSpecials, "Vocab::from_state_dict: '", prefix, "symbols' has ", values.size(),
           " entries: an empty vocabulary (the ", kNumSpecials, " specials and no symbol)");
  for (int64_t id = 0; id < kNumSpecials; ++id)
    TG_CHECK(values[size_t(id)] == -1 - id, "Vocab::from_state_dict: '", prefix, "symbols'[", id, "] is ",
             values[size_t(id)], ", expected the special marker ", -1 - id);
  std::vector<int64_t> symbols(values.begin() + kNumSpecials, values.end());
  try {
    return Vocab(level[0] == 0 ? TokenLevel::Char : TokenLevel::Byte, std::move(symbols));
  } catch (const Error& e) {
    detail::throw_error(detail::str_cat("Vocab::from_state_dict: '", prefix, "symbols': ", e.what()));
  }
}

}  // namespace tapegrad

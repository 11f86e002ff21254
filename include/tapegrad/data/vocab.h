// Vocab: a character-level (Unicode code point) or byte-level vocabulary for language models, with
// reserved ids for padding, unknown symbols and record boundaries; it travels with a checkpoint as
// a tensor in the model's safetensors state dict.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tapegrad/io/safetensors.h"

namespace tapegrad {

// What one token is: a Unicode code point of UTF-8 text, or one byte (any bytes, no decoding).
enum class TokenLevel { Char, Byte };

// Ids 0..3 are reserved (specials first, as torchtext's build_vocab_from_iterator puts them); the
// symbols follow from id 4, most frequent first, ties by smaller code point (or byte value).
//
//   Vocab v = Vocab::build({"hello", "world"}, TokenLevel::Char);
//   std::vector<int64_t> ids = v.encode("hold");   // 'h','o','l','d' -> their ids
//   v.decode(ids) == "hold";
//   StateDict sd = model.state_dict(); for (auto& kv : v.state_dict()) sd.push_back(kv);
//   save_safetensors(path, sd);  ...  Vocab v2 = Vocab::from_state_dict(load_safetensors(path));
class Vocab {
 public:
  static constexpr int64_t kPadId = 0;  // fills batches past a sequence's end
  static constexpr int64_t kUnkId = 1;  // any symbol the vocabulary lacks (e.g. seen only in validation)
  static constexpr int64_t kBosId = 2;  // start of a record
  static constexpr int64_t kEosId = 3;  // end of a record
  static constexpr int64_t kNumSpecials = 4;

  // `symbols` are the non-special tokens in id order (id kNumSpecials + i is symbols[i]): code points
  // for Char (Unicode scalar values), byte values 0..255 for Byte. Throws tapegrad::Error when it is
  // empty, holds a duplicate or holds a value that is not a symbol of `level`.
  Vocab(TokenLevel level, std::vector<int64_t> symbols);

  // Counts the symbols of `texts` and keeps those seen at least min_freq (>= 1) times. Throws
  // tapegrad::Error for invalid UTF-8 in Char mode (naming the text's index and byte offset) and
  // when no symbol is kept (an empty vocabulary).
  static Vocab build(const std::vector<std::string>& texts, TokenLevel level, int64_t min_freq = 1);

  TokenLevel level() const { return level_; }
  int64_t size() const { return kNumSpecials + int64_t(symbols_.size()); }  // including the specials
  const std::vector<int64_t>& symbols() const { return symbols_; }
  // The id of a code point (Char) or byte value (Byte); kUnkId when it is not in the vocabulary.
  int64_t id(int64_t symbol) const;
  // The symbol of a non-special id; throws tapegrad::Error for a special or out-of-range id.
  int64_t symbol(int64_t id) const;

  // Text to ids, one per code point (Char) or byte (Byte), unknown symbols as kUnkId; adds no
  // specials. Throws tapegrad::Error for invalid UTF-8 in Char mode, with the byte offset.
  std::vector<int64_t> encode(std::string_view text) const;
  // Ids to text: pad, bos and eos are dropped, unk becomes U+FFFD. Byte mode concatenates the bytes
  // as they are (a sampled sequence need not be valid UTF-8). Throws for an id outside [0, size()).
  std::string decode(const std::vector<int64_t>& ids) const;

  // The vocabulary as tensors: `<prefix>symbols`, int64 [size()] in id order, the specials stored
  // as -1 - id (pad -1, unk -2, bos -3, eos -4) and the symbols as code points or byte values; and
  // `<prefix>level`, int64 [1], 0 for Char and 1 for Byte.
  StateDict state_dict(const std::string& prefix = "vocab.") const;
  // The inverse; entries of `dict` without the prefix are ignored, so a whole checkpoint can be
  // passed. Throws tapegrad::Error, naming the key, when an entry is missing, is not int64 of the
  // shape above, or holds misplaced specials or invalid, duplicate or no symbols.
  static Vocab from_state_dict(const StateDict& dict, const std::string& prefix = "vocab.");

 private:
  TokenLevel level_;
  std::vector<int64_t> symbols_;
  std::vector<int64_t> small_ids_;  // id of every symbol below 256 (kUnkId where absent): the common case
  std::unordered_map<int64_t, int64_t> large_ids_;
};

}  // namespace tapegrad

// Text corpora for character- or byte-level language models: records read from UTF-8 files,
// a deterministic train/validation split, a vocabulary built on the training split, and
// datasets whose batches are padded next-token-prediction batches (see lm_batch.h).
//
//   TextCorpus corpus("/usr/share/games/fortunes");            // every fortune is one record
//   BucketBatchSamplerOptions so;  so.batch_size = 32;  so.seed = 1;
//   BucketBatchSampler sampler(corpus.train().lengths(), so);
//   DataLoader loader(corpus.train(), sampler);                // prefetches the next batch
//   for (const Example& batch : loader)                        // input/target [T, B], lengths [B]
//     for (const Example& chunk : split_bptt(batch, 128)) { ... }
//   StateDict sd = model.state_dict(); for (auto& kv : corpus.vocab().state_dict()) sd.push_back(kv);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/data/dataset.h"
#include "tapegrad/data/lm_batch.h"
#include "tapegrad/data/vocab.h"

namespace tapegrad {

// Token-id records as a Dataset. get(i): input and target int64 [n - 1] (record i shifted by one)
// and lengths int64 [] (n - 1). get_batch(indices): collate_lm of those records with the
// dataset's LMCollateOptions: input/target [T, B] (or [B, T]) and lengths [B].
class TextDataset : public Dataset {
 public:
  // Each record needs at least 2 ids; throws tapegrad::Error (naming the record) otherwise.
  explicit TextDataset(std::vector<std::vector<int64_t>> records, LMCollateOptions collate = {});
  int64_t size() const override { return int64_t(records_.size()); }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

  const std::vector<int64_t>& record(int64_t index) const;  // the ids, bos/eos included
  const std::vector<std::vector<int64_t>>& records() const { return records_; }
  // Each record's sequence length as collated (ids - 1), the lengths a BucketBatchSampler sorts.
  std::vector<int64_t> lengths() const;
  int64_t num_tokens() const;  // ids over all records, bos/eos included
  const LMCollateOptions& collate_options() const { return collate_; }

 private:
  std::vector<std::vector<int64_t>> records_;
  LMCollateOptions collate_;
};

struct TextCorpusOptions {
  // A line equal to this (a trailing '\r' ignored) ends a record and belongs to none: the fortune
  // format's "%". Empty: each file is one record.
  std::string separator = "%";
  TokenLevel level = TokenLevel::Char;
  // The share of records held out for validation, in [0, 1): floor(fraction * records) of them,
  // drawn uniformly by Generator(seed); both splits keep corpus order.
  double valid_fraction = 0.05;
  uint64_t seed = 0;
  int64_t min_freq = 1;  // training symbols seen fewer times map to Vocab::kUnkId
  // Wrap every record as bos, symbols..., eos, so that the model learns where records start and end
  // (and generation can start from bos and stop at eos). Records of fewer than 2 ids are left out.
  bool add_bos = true;
  bool add_eos = true;
  // Records with more symbols than this (bos/eos not counted) are left out of both splits; 0 keeps all.
  int64_t max_symbols = 0;
  LMCollateOptions collate;  // how train() and valid() batch (pad_id is always Vocab::kPadId)
};

// Reads `paths` (files, or directories whose files are taken, in name order, skipping symlinks,
// subdirectories, hidden files and the fortune index files "*.dat"), splits them into records at
// separator lines, drops records that hold only whitespace, splits train/validation, builds the
// vocabulary from the training records and encodes both splits with it (validation symbols it
// lacks become kUnkId).
// Throws tapegrad::Error, naming the file, for a missing path, a directory without text files, an
// unreadable file, invalid UTF-8 in Char mode (with the byte offset in that file), a corpus with no
// non-empty record, options out of range, or an empty vocabulary (e.g. from min_freq).
class TextCorpus {
 public:
  explicit TextCorpus(const std::vector<std::string>& paths, const TextCorpusOptions& options = {});
  explicit TextCorpus(const std::string& path, const TextCorpusOptions& options = {})
      : TextCorpus(std::vector<std::string>{path}, options) {}

  const Vocab& vocab() const { return vocab_; }
  const TextDataset& train() const { return train_; }
  const TextDataset& valid() const { return valid_; }
  const std::vector<std::string>& files() const { return files_; }
  const TextCorpusOptions& options() const { return options_; }
  int64_t num_records() const { return int64_t(train_.size() + valid_.size()); }
  // Symbols (code points for Char, bytes for Byte) in all kept records, bos/eos not counted.
  int64_t num_symbols() const { return num_symbols_; }
  // Records left out: longer than max_symbols, or under 2 ids (possible without bos and eos).
  int64_t num_skipped() const { return num_skipped_; }
  int64_t num_valid_unknown() const { return valid_unknown_; }  // kUnkId tokens in valid()
  // For each split record, its position among all kept records in corpus order.
  const std::vector<int64_t>& train_indices() const { return train_indices_; }
  const std::vector<int64_t>& valid_indices() const { return valid_indices_; }

 private:
  TextCorpusOptions options_;
  std::vector<std::string> files_;
  Vocab vocab_;
  TextDataset train_, valid_;
  std::vector<int64_t> train_indices_, valid_indices_;
  int64_t num_symbols_ = 0, num_skipped_ = 0, valid_unknown_ = 0;

  struct Built;  // everything the constructor computes, so that every member is built once
  static Built build(const std::vector<std::string>& paths, const TextCorpusOptions& options);
  explicit TextCorpus(Built&& built);
};

// The records of one text: the pieces between lines equal to `separator` (a trailing '\r' on a line
// is ignored when comparing), without the newline that ends each piece's last line. Empty pieces are
// kept (callers drop what they consider empty), but a separator as the text's last line opens no
// record, and an empty text has none. An empty separator gives the whole text as one record.
std::vector<std::string> split_records(std::string_view text, const std::string& separator = "%");

// The files a TextCorpus reads for `paths`, in order (see above). Throws like TextCorpus.
std::vector<std::string> list_text_files(const std::vector<std::string>& paths);

}  // namespace tapegrad

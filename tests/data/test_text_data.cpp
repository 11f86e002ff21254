// Text data: Vocab (UTF-8 and byte round trips, order, checkpoint round trip), record splitting,
// TextCorpus (file listing, split, vocabulary from the training split only, bad input), and the
// real fortunes corpus when the Debian package is installed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "tapegrad/data/dataloader.h"
#include "tapegrad/data/lm_batch.h"
#include "tapegrad/data/sampler.h"
#include "tapegrad/data/text.h"
#include "tapegrad/data/vocab.h"
#include "tapegrad/io/safetensors.h"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

// A fresh, empty directory for one test.
fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / "tapegrad_test_text" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// "héllo wörld €𝄞": code points of 1, 2, 3 and 4 UTF-8 bytes.
const std::string kMixed = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x82\xAC\xF0\x9D\x84\x9E";

TEST(Vocab, CharRoundTripWithMultibyteCodePoints) {
  Vocab v = Vocab::build({kMixed}, TokenLevel::Char);
  std::vector<int64_t> ids = v.encode(kMixed);
  EXPECT_EQ(ids.size(), 14u);  // h é l l o ␠ w ö r l d ␠ € 𝄞
  EXPECT_EQ(v.decode(ids), kMixed);
  // Distinct code points: h é l o ␠ w ö r d € 𝄞 = 11, plus the 4 specials.
  EXPECT_EQ(v.size(), 4 + 11);
  for (int64_t cp : {0xE9, 0xF6, 0x20AC, 0x1D11E}) {
    int64_t id = v.id(cp);
    EXPECT_NE(id, Vocab::kUnkId) << cp;
    EXPECT_EQ(v.symbol(id), cp);
  }
  EXPECT_EQ(ids[1], v.id(0xE9));
  EXPECT_EQ(ids[13], v.id(0x1D11E));
}

TEST(Vocab, ByteRoundTrip) {
  Vocab v = Vocab::build({kMixed}, TokenLevel::Byte);
  std::vector<int64_t> ids = v.encode(kMixed);
  EXPECT_EQ(ids.size(), kMixed.size());  // 21 bytes
  EXPECT_EQ(v.decode(ids), kMixed);
  EXPECT_EQ(v.symbol(ids[1]), 0xC3);
  // Byte mode takes any bytes, including ones that are not UTF-8.
  Vocab raw = Vocab::build({std::string("\xFF\xFE\x00", 3)}, TokenLevel::Byte);
  EXPECT_EQ(raw.decode(raw.encode(std::string("\xFE\x00\xFF", 3))), std::string("\xFE\x00\xFF", 3));
}

TEST(Vocab, OrderIsByFrequencyThenSymbol) {
  Vocab a = Vocab::build({"abb", "c"}, TokenLevel::Char);  // b:2, then a and c tied: a first
  EXPECT_EQ(a.symbols(), (std::vector<int64_t>{'b', 'a', 'c'}));
  EXPECT_EQ(a.id('b'), 4);
  EXPECT_EQ(a.id('c'), 6);
  Vocab f = Vocab::build({"abbccc"}, TokenLevel::Char, /*min_freq=*/2);
  EXPECT_EQ(f.symbols(), (std::vector<int64_t>{'c', 'b'}));
  EXPECT_EQ(f.id('a'), Vocab::kUnkId);
}

TEST(Vocab, UnknownsAndSpecialsDecode) {
  Vocab v = Vocab::build({"ab"}, TokenLevel::Char);
  std::vector<int64_t> ids = v.encode("azb");
  EXPECT_EQ(ids, (std::vector<int64_t>{v.id('a'), Vocab::kUnkId, v.id('b')}));
  EXPECT_EQ(v.decode(ids),
            "a\xEF\xBF\xBD"
            "b");  // unk as U+FFFD
  EXPECT_EQ(v.decode({Vocab::kBosId, v.id('a'), Vocab::kPadId, v.id('b'), Vocab::kEosId}), "ab");
  expect_error([&] { v.decode({v.size()}); }, {"Vocab::decode", "id 6", "[0, 6)"});
  expect_error([&] { v.symbol(Vocab::kUnkId); }, {"Vocab::symbol", "id 1"});
}

TEST(Vocab, InvalidUtf8IsAnErrorWithItsOffset) {
  Vocab v = Vocab::build({"ab"}, TokenLevel::Char);
  struct Case {
    std::string text;
    std::string offset;
  };
  for (const Case& c : {Case{"ab\xC3\x28", "byte offset 2"},        // bad continuation byte
                        Case{"a\xC0\xAF", "byte offset 1"},         // overlong '/'
                        Case{"\xED\xA0\x80", "byte offset 0"},      // a UTF-16 surrogate
                        Case{"abc\xE2\x82", "byte offset 3"},       // truncated at the end
                        Case{"\xF4\x90\x80\x80", "byte offset 0"},  // above U+10FFFF
                        Case{"a\x80", "byte offset 1"}}) {          // a lone continuation byte
    expect_error([&] { v.encode(c.text); }, {"Vocab::encode", "invalid UTF-8", c.offset});
    expect_error([&] { Vocab::build({"x", c.text}, TokenLevel::Char); }, {"Vocab::build", "text 1", c.offset});
  }
  // Negative control: the largest scalar value and the last one before the surrogates are valid.
  EXPECT_EQ(v.encode("\xF4\x8F\xBF\xBF\xED\x9F\xBF").size(), 2u);
}

TEST(Vocab, StateDictRoundTripThroughSafetensors) {
  for (TokenLevel level : {TokenLevel::Char, TokenLevel::Byte}) {
    Vocab v = Vocab::build({kMixed, "zzz"}, level);
    StateDict checkpoint = {{"fc.weight", ones({2, 3})}};
    for (auto& kv : v.state_dict()) checkpoint.push_back(kv);
    std::string path = (temp_dir("vocab_round_trip") / "model.safetensors").string();
    save_safetensors(path, checkpoint);
    StateDict loaded = load_safetensors(path);
    ASSERT_EQ(loaded.size(), 3u);
    EXPECT_EQ(loaded[1].first, "vocab.symbols");
    std::vector<int64_t> stored = loaded[1].second.tolist<int64_t>();
    EXPECT_EQ(std::vector<int64_t>(stored.begin(), stored.begin() + 4), (std::vector<int64_t>{-1, -2, -3, -4}));
    Vocab back = Vocab::from_state_dict(loaded);
    EXPECT_EQ(back.level(), level);
    EXPECT_EQ(back.symbols(), v.symbols());
    EXPECT_EQ(back.encode(kMixed + "q"), v.encode(kMixed + "q"));
    EXPECT_EQ(back.decode(back.encode(kMixed)), kMixed);
  }
  // Another prefix keeps two vocabularies apart in one dict.
  Vocab a = Vocab::build({"a"}, TokenLevel::Char), b = Vocab::build({"bc"}, TokenLevel::Byte);
  StateDict both = a.state_dict("src.");
  for (auto& kv : b.state_dict("tgt.")) both.push_back(kv);
  EXPECT_EQ(Vocab::from_state_dict(both, "tgt.").symbols(), b.symbols());
  EXPECT_EQ(Vocab::from_state_dict(both, "src.").level(), TokenLevel::Char);
}

TEST(Vocab, BadStateDictsAreClearErrors) {
  Vocab v = Vocab::build({"ab"}, TokenLevel::Char);
  StateDict good = v.state_dict();
  auto with_symbols = [&](std::vector<int64_t> values) {
    return StateDict{{"vocab.symbols", tensor<int64_t>(values)}, good[1]};
  };
  expect_error([&] { Vocab::from_state_dict({good[0]}); }, {"Vocab::from_state_dict", "no entry 'vocab.level'"});
  expect_error([&] { Vocab::from_state_dict(good, "other."); }, {"no entry 'other.level'"});
  expect_error(
      [&] {
        Vocab::from_state_dict({{"vocab.symbols", ones({6})}, good[1]});
      },
      {"'vocab.symbols'", "1-D int64", "float32"});
  expect_error([&] { Vocab::from_state_dict(with_symbols({-1, -2, -3, -4})); }, {"empty vocabulary"});
  expect_error([&] { Vocab::from_state_dict(with_symbols({-1, -3, -2, -4, 97})); }, {"'vocab.symbols'[1]", "-3"});
  expect_error(
      [&] {
        Vocab::from_state_dict(with_symbols({-1, -2, -3, -4, 97, 98, 97}));
      },
      {"'vocab.symbols'", "symbol 97 appears twice"});
  expect_error(
      [&] {
        Vocab::from_state_dict(with_symbols({-1, -2, -3, -4, 0xD800}));
      },
      {"symbol 55296", "not a valid char symbol"});
  expect_error(
      [&] {
        Vocab::from_state_dict({good[0], {"vocab.level", tensor<int64_t>({2})}});
      },
      {"'vocab.level'", "0 (char) or 1 (byte)"});
  expect_error([&] { Vocab(TokenLevel::Byte, {256}); }, {"Vocab", "symbol 256", "byte value"});
  expect_error([&] { Vocab(TokenLevel::Char, {}); }, {"Vocab", "empty vocabulary"});
}

TEST(SplitRecords, FortuneFormat) {
  using R = std::vector<std::string>;
  EXPECT_EQ(split_records("a\nb\n%\nc\n"), (R{"a\nb", "c"}));
  EXPECT_EQ(split_records("a\n%\nc"), (R{"a", "c"}));
  EXPECT_EQ(split_records("a\n%\n"), (R{"a"}));                       // a final separator opens no record
  EXPECT_EQ(split_records("%\na\n%\n%\nb"), (R{"", "a", "", "b"}));   // empty pieces are kept
  EXPECT_EQ(split_records("a\r\n%\r\nb\r\n"), (R{"a\r", "b\r"}));     // "%\r" is a separator too
  EXPECT_EQ(split_records("a %\n%%\n %\nb"), (R{"a %\n%%\n %\nb"}));  // only a line of exactly "%"
  EXPECT_EQ(split_records("x\n--\ny", "--"), (R{"x", "y"}));
  EXPECT_EQ(split_records("x\n%\ny\n", ""), (R{"x\n%\ny"}));
  EXPECT_TRUE(split_records("").empty());
}

// 40 records "record <i>" over two files plus one record holding the only 'Q'.
fs::path small_corpus(const std::string& name) {
  fs::path dir = temp_dir(name);
  std::string a, b;
  for (int i = 0; i < 20; ++i) a += "record " + std::to_string(i) + "\n%\n";
  for (int i = 20; i < 40; ++i) b += "record " + std::to_string(i) + "\nline two\n%\n";
  b += "   \n%\nQ record\n";  // a whitespace-only record (dropped), then the only 'Q'
  write(dir / "a", a);
  write(dir / "b", b);
  write(dir / "a.dat", std::string("\x00\x02\x80\xFF", 4));  // a fortune index: binary, skipped
  write(dir / ".hidden", "\xFF");
  fs::create_symlink(dir / "a", dir / "a.u8");
  fs::create_directories(dir / "off");
  write(dir / "off" / "rude", "\xFF");
  return dir;
}

TEST(TextCorpus, ReadsRecordsAndSplitsDeterministically) {
  fs::path dir = small_corpus("split");
  TextCorpusOptions o;
  o.valid_fraction = 0.25;
  TextCorpus c(dir.string(), o);
  EXPECT_EQ(c.files(), (std::vector<std::string>{(dir / "a").string(), (dir / "b").string()}));
  EXPECT_EQ(c.num_records(), 41);
  EXPECT_EQ(c.valid().size(), 10);  // floor(0.25 * 41)
  EXPECT_EQ(c.train().size(), 31);
  // Symbols: "record i" (8 or 9 chars), "record i\nline two" (+9), "Q record" (8).
  int64_t symbols = 10 * 8 + 10 * 9 + 20 * (9 + 9) + 8;
  EXPECT_EQ(c.num_symbols(), symbols);
  EXPECT_EQ(c.train().num_tokens() + c.valid().num_tokens(), symbols + 2 * 41);  // bos and eos

  // The two index lists partition 0..40, each in corpus order.
  std::vector<int64_t> all = c.train_indices();
  all.insert(all.end(), c.valid_indices().begin(), c.valid_indices().end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 41; ++i) EXPECT_EQ(all[size_t(i)], i);
  EXPECT_TRUE(std::is_sorted(c.valid_indices().begin(), c.valid_indices().end()));

  // Records decode back to their text, wrapped in bos ... eos.
  std::vector<int64_t> first = c.train_indices()[0] == 0 ? c.train().record(0) : c.valid().record(0);
  EXPECT_EQ(first.front(), Vocab::kBosId);
  EXPECT_EQ(first.back(), Vocab::kEosId);
  EXPECT_EQ(c.vocab().decode(first), "record 0");

  // Same seed, same split; another seed, another split.
  EXPECT_EQ(TextCorpus(dir.string(), o).valid_indices(), c.valid_indices());
  o.seed = 7;
  EXPECT_NE(TextCorpus(dir.string(), o).valid_indices(), c.valid_indices());
  // No validation split at all.
  o.valid_fraction = 0.0;
  TextCorpus whole(std::vector<std::string>{(dir / "a").string(), (dir / "b").string()}, o);
  EXPECT_EQ(whole.train().size(), 41);
  EXPECT_EQ(whole.valid().size(), 0);
}

TEST(TextCorpus, VocabularyComesFromTheTrainingSplitOnly) {
  fs::path dir = small_corpus("vocab");
  int64_t q_record = 40;  // the last record in corpus order
  bool seen_in_valid = false, seen_in_train = false;
  for (uint64_t seed = 0; seed < 64 && !(seen_in_valid && seen_in_train); ++seed) {
    TextCorpusOptions o;
    o.valid_fraction = 0.25;
    o.seed = seed;
    TextCorpus c(dir.string(), o);
    const auto& v = c.valid_indices();
    bool in_valid = std::find(v.begin(), v.end(), q_record) != v.end();
    if (in_valid) {
      seen_in_valid = true;
      EXPECT_EQ(c.vocab().id('Q'), Vocab::kUnkId) << "seed " << seed;
      EXPECT_EQ(c.num_valid_unknown(), 1) << "seed " << seed;  // the one 'Q'
      const std::vector<int64_t>& r = c.valid().record(int64_t(v.size()) - 1);
      EXPECT_EQ(r[1], Vocab::kUnkId);
    } else {
      // The negative control: when the record is trained on, 'Q' is in the vocabulary.
      seen_in_train = true;
      EXPECT_NE(c.vocab().id('Q'), Vocab::kUnkId) << "seed " << seed;
      EXPECT_EQ(c.num_valid_unknown(), 0) << "seed " << seed;
    }
  }
  EXPECT_TRUE(seen_in_valid && seen_in_train);
}

TEST(TextCorpus, OptionsShapeTheRecords) {
  fs::path dir = temp_dir("options");
  std::string file = write(dir / "t", "a\n%\nbb\n%\nccc\n%\n\xC3\xA9\xC3\xA9\n");
  TextCorpusOptions o;
  o.valid_fraction = 0.0;
  o.max_symbols = 2;  // drops "ccc"; "éé" is 2 code points (4 bytes)
  TextCorpus c(file, o);
  EXPECT_EQ(c.num_records(), 3);
  EXPECT_EQ(c.num_skipped(), 1);
  EXPECT_EQ(c.train().lengths(), (std::vector<int64_t>{2, 3, 3}));  // bos + n + eos, minus one
  o.level = TokenLevel::Byte;                                       // now "éé" is 4 bytes: dropped too
  EXPECT_EQ(TextCorpus(file, o).num_records(), 2);
  o.level = TokenLevel::Char;
  o.max_symbols = 0;
  o.add_bos = o.add_eos = false;  // "a" alone cannot make a (input, target) pair
  TextCorpus bare(file, o);
  EXPECT_EQ(bare.num_records(), 3);
  EXPECT_EQ(bare.num_skipped(), 1);
  EXPECT_EQ(bare.vocab().decode(bare.train().record(0)), "bb");
  o.separator = "";  // each file one record
  EXPECT_EQ(TextCorpus(file, o).num_records(), 1);
}

TEST(TextCorpus, BadInputNamesTheFile) {
  fs::path dir = temp_dir("bad");
  std::string missing = (dir / "nope.txt").string();
  expect_error([&] { TextCorpus c(missing); }, {"TextCorpus", "no such file or directory", missing});
  fs::create_directories(dir / "empty_dir");
  write(dir / "empty_dir" / "x.dat", "index");
  expect_error([&] { TextCorpus c((dir / "empty_dir").string()); }, {"TextCorpus", "empty_dir", "no text files"});
  std::string blank = write(dir / "blank", "%\n  \n%\n\n%\n");
  expect_error([&] { TextCorpus c(blank); }, {"TextCorpus", "no non-empty records", blank});
  std::string empty = write(dir / "empty", "");
  expect_error([&] { TextCorpus c(empty); }, {"no non-empty records", empty});
  std::string latin1 = write(dir / "latin1", "caf\xE9\n%\nok\n");  // Latin-1 'é' at byte 3
  expect_error([&] { TextCorpus c(latin1); }, {"TextCorpus", latin1, "not valid UTF-8", "0xe9", "byte offset 3"});
  TextCorpusOptions bytes;
  bytes.level = TokenLevel::Byte;
  EXPECT_EQ(TextCorpus(latin1, bytes).num_records(), 2);  // the negative control: bytes are fine
  TextCorpusOptions rare;
  rare.min_freq = 1000;
  std::string fine = write(dir / "fine", "abc\n%\nabd\n");
  expect_error([&] { TextCorpus c(fine, rare); }, {"TextCorpus", fine, "empty vocabulary", "min_freq = 1000"});
  TextCorpusOptions frac;
  frac.valid_fraction = 1.0;
  expect_error([&] { TextCorpus c(fine, frac); }, {"TextCorpus", "valid_fraction", "[0, 1)"});
  expect_error([&] { TextCorpus c(std::vector<std::string>{}); }, {"TextCorpus", "no path"});
  expect_error([&] { TextDataset d({{1, 2}, {3}}); }, {"TextDataset", "record 1", "at least 2"});
}

// The real corpus: Debian's `fortunes` package (tools/install_deps.sh installs it).
TEST(TextCorpus, Fortunes) {
  const std::string root = "/usr/share/games/fortunes";
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " is missing: install Debian's `fortunes` package";
  TextCorpus corpus(root);
  for (const std::string& f : corpus.files()) {
    EXPECT_FALSE(f.size() > 4 && f.substr(f.size() - 4) == ".dat") << f;
    EXPECT_FALSE(fs::is_symlink(f)) << f;
  }
  EXPECT_GT(corpus.num_records(), 10000);
  EXPECT_EQ(corpus.valid().size(), int64_t(0.05 * double(corpus.num_records())));

  // Padding share of one training epoch at batch 32, collated by the DataLoader.
  auto padding = [&](bool bucketing) {
    BucketBatchSamplerOptions so;
    so.batch_size = 32;
    so.bucketing = bucketing;
    so.seed = 1;
    BucketBatchSampler sampler(corpus.train().lengths(), so);
    DataLoader loader(corpus.train(), sampler);
    PaddingStats stats;
    int64_t batches = 0;
    for (const Example& batch : loader) {
      stats += padding_stats(batch);
      ++batches;
    }
    EXPECT_EQ(batches, sampler.size());
    return stats;
  };
  PaddingStats on = padding(true), off = padding(false);
  EXPECT_EQ(on.real, off.real);
  EXPECT_EQ(on.real, corpus.train().num_tokens() - corpus.train().size());
  EXPECT_LT(on.padding_share(), off.padding_share());
  std::vector<int64_t> lengths = corpus.train().lengths();
  std::sort(lengths.begin(), lengths.end());
  std::printf(
      "fortunes: %zu files, %lld records (%lld train, %lld valid), %lld characters, vocabulary %lld "
      "(4 specials), %lld unknown tokens in valid; sequence length median %lld, max %lld\n",
      corpus.files().size(), (long long)corpus.num_records(), (long long)corpus.train().size(),
      (long long)corpus.valid().size(), (long long)corpus.num_symbols(), (long long)corpus.vocab().size(),
      (long long)corpus.num_valid_unknown(), (long long)lengths[lengths.size() / 2], (long long)lengths.back());
  std::printf(
      "fortunes, batch 32, one epoch: padding share %.1f%% with bucketing (%d batches per bucket), "
      "%.1f%% without (%lld real steps)\n",
      100 * on.padding_share(), int(BucketBatchSamplerOptions().batches_per_bucket), 100 * off.padding_share(),
      (long long)on.real);
}

}  // namespace
}  // namespace tapegrad

// Packing invariants, document sources and length distributions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "data/context_shards.h"
#include "data/files.h"
#include "data/local_batch.h"
#include "data/packing.h"
#include "data/sources.h"

namespace lct::data_test {  // the file's own namespace: a unity build compiles test files together
namespace {
namespace fs = std::filesystem;

std::unique_ptr<DocumentSource> synthetic(DocLengthDist dist, int64_t max_len, uint64_t seed = 3) {
  SyntheticOptions o;
  o.seed = seed;
  o.vocab_size = 256;
  o.lengths = {dist, 1, max_len, seed};
  return make_synthetic_source(o);
}

TEST(Packing, SequencesTileTheDocumentStreamExactly) {
  auto src = synthetic(DocLengthDist::uniform, 300);
  SequencePacker packer(*src, 256);
  // concatenating the sequences gives the concatenated documents, in order
  std::vector<int32_t> from_sequences, from_docs;
  for (int64_t k = 0; k < 20; ++k) {
    const PackedBatch b = packer.sequence(k);
    from_sequences.insert(from_sequences.end(), b.tokens.begin(), b.tokens.end());
  }
  for (int64_t d = 0; int64_t(from_docs.size()) < 20 * 256; ++d) {
    std::vector<int32_t> doc(size_t(src->doc_length(d)));
    src->doc_tokens(d, 0, int64_t(doc.size()), doc.data(), nullptr);
    from_docs.insert(from_docs.end(), doc.begin(), doc.end());
  }
  from_docs.resize(from_sequences.size());
  EXPECT_EQ(from_sequences, from_docs);
}

TEST(Packing, BoundariesPositionsAndTargets) {
  auto src = synthetic(DocLengthDist::uniform, 100);
  SequencePacker packer(*src, 128);
  for (int64_t k = 0; k < 30; ++k) {
    const PackedBatch b = packer.sequence(k);
    ASSERT_EQ(b.num_tokens(), 128);
    ASSERT_EQ(check_cu_seqlens(b.cu_seqlens, 128), "");
    for (int64_t d = 0; d < b.num_docs(); ++d) {
      for (int32_t t = b.cu_seqlens[d]; t < b.cu_seqlens[d + 1]; ++t) {
        EXPECT_EQ(b.positions[t], t - b.cu_seqlens[d]);  // restart per document
        if (t + 1 < b.cu_seqlens[d + 1]) {
          EXPECT_EQ(b.targets[t], b.tokens[t + 1]);
        } else {
          EXPECT_EQ(b.targets[t], -1);  // last token of a document (or piece)
        }
      }
    }
    EXPECT_EQ(b.num_targets(), 128 - b.num_docs());
  }
}

TEST(Packing, CutDocumentContinuesAsItsOwnDocument) {
  auto src = synthetic(DocLengthDist::fixed, 100);  // every document is 100 tokens
  SequencePacker packer(*src, 64);
  const PackedBatch s0 = packer.sequence(0), s1 = packer.sequence(1);
  EXPECT_EQ(s0.cu_seqlens, (std::vector<int32_t>{0, 64}));
  EXPECT_EQ(s1.cu_seqlens, (std::vector<int32_t>{0, 36, 64}));  // remainder, then next doc
  EXPECT_EQ(s1.positions[0], 0);
  EXPECT_EQ(s1.positions[36], 0);
  std::vector<int32_t> doc0(100);
  src->doc_tokens(0, 0, 100, doc0.data(), nullptr);
  EXPECT_TRUE(std::equal(s1.tokens.begin(), s1.tokens.begin() + 36, doc0.begin() + 64));
  EXPECT_EQ(s0.targets[63], -1);
}

TEST(Packing, RandomAccessEqualsSequentialAccess) {
  auto src = synthetic(DocLengthDist::pretrain, 512);
  SequencePacker sequential(*src, 256), random(*src, 256);
  std::vector<PackedBatch> seq;
  for (int64_t k = 0; k < 2100; ++k) seq.push_back(sequential.sequence(k));  // crosses a cache stride
  for (int64_t k : {2099, 5, 1500, 0, 1024, 1023, 2048}) {
    const PackedBatch b = random.sequence(k);
    EXPECT_EQ(b.tokens, seq[size_t(k)].tokens) << k;
    EXPECT_EQ(b.cu_seqlens, seq[size_t(k)].cu_seqlens) << k;
  }
}

// Per-document mask data (data.prefix_fraction, data.answers_per_question): a document of
// L tokens has floor(f L) prefix tokens, the rest cut into near-equal answers; a piece cut
// at a sequence boundary keeps its share; the targets the mask does not train are -1.
TEST(Packing, PrefixesFollowTheDocumentAcrossCuts) {
  auto src = synthetic(DocLengthDist::fixed, 100);  // every document is 100 tokens
  SequencePacker packer(*src, 64, DocStructure{0.7, 0});  // P = 70
  const PackedBatch s0 = packer.sequence(0), s1 = packer.sequence(1);
  EXPECT_EQ(s0.prefix_lens, (std::vector<int32_t>{64}));      // doc 0 [0, 64): all prefix
  EXPECT_EQ(s1.prefix_lens, (std::vector<int32_t>{6, 28}));   // doc 0 [64, 100): 6 left; doc 1 [0, 28)
  EXPECT_TRUE(s0.segment_ids.empty());
  EXPECT_EQ(check_mask_data(s1), "");
  for (int64_t t = 0; t < 64; ++t) EXPECT_EQ(s0.targets[t], -1) << t;  // inside the prefix
  for (int64_t t = 0; t < 36; ++t)  // piece of doc 0: targets at position + 1 >= 6
    EXPECT_EQ(s1.targets[t] >= 0, t + 1 >= 6 && t + 1 < 36) << t;
  for (int64_t t = 36; t < 64; ++t) EXPECT_EQ(s1.targets[t], -1) << t;  // doc 1's prefix is 28 long
}

TEST(Packing, SegmentsAreAQuestionThenNearEqualAnswers) {
  auto src = synthetic(DocLengthDist::uniform, 90, 5);
  const DocStructure st{0.25, 3};
  SequencePacker packer(*src, 128, st);
  for (int64_t k = 0; k < 40; ++k) {
    const PackedBatch b = packer.sequence(k);
    ASSERT_EQ(b.segment_ids.size(), b.tokens.size());
    EXPECT_TRUE(b.prefix_lens.empty());
    ASSERT_EQ(check_mask_data(b), "") << k;
    for (int64_t d = 0; d < b.num_docs(); ++d)
      for (int32_t t = b.cu_seqlens[d]; t + 1 < b.cu_seqlens[d + 1]; ++t) {
        const bool same = b.segment_ids[t + 1] == b.segment_ids[t];
        EXPECT_EQ(b.targets[t] >= 0, same) << "sequence " << k << " token " << t;  // none across segments
      }
  }
  // a whole document: question floor(L / 4), answers of the rest's thirds
  const PackedBatch b = packer.sequence(0);
  const int64_t L = src->doc_length(0);
  ASSERT_GE(b.cu_seqlens[1], L) << "document 0 is cut: pick another seed";
  const int64_t q = L / 4, r = L - q;
  for (int64_t p = 0; p < L; ++p) {
    const int32_t want = p < q ? 0 : p < q + r / 3 ? 1 : p < q + 2 * r / 3 ? 2 : 3;
    EXPECT_EQ(b.segment_ids[p], want) << p;
  }
}

TEST(Packing, MaskDataShapesAreChecked) {
  PackedBatch b;
  b.tokens = {1, 2, 3, 4, 5};
  b.cu_seqlens = {0, 2, 5};
  b.prefix_lens = {2, 4};
  EXPECT_NE(check_mask_data(b).find("prefix_lens[1] = 4 is outside its document of 3 tokens"), std::string::npos);
  b.prefix_lens = {1};
  EXPECT_NE(check_mask_data(b).find("prefix_lens has 1 entries for 2 documents"), std::string::npos);
  b.prefix_lens.clear();
  b.segment_ids = {0, 1, 0, 2, 1};
  EXPECT_NE(check_mask_data(b).find("segment_ids[4] = 1 after 2"), std::string::npos);
  b.segment_ids = {0, 1, 2, 2, 0};
  EXPECT_NE(check_mask_data(b).find("segment_ids[4] = 0 after 2"), std::string::npos);
  b.segment_ids = {0, 1, 3, -1, 5};
  EXPECT_NE(check_mask_data(b).find("segment_ids[3] = -1"), std::string::npos);
  b.segment_ids = {0, 1, 1, 2, 7};  // a piece may start inside an answer (cut documents)
  EXPECT_EQ(check_mask_data(b), "");
  b.segment_ids = {0, 1};
  EXPECT_NE(check_mask_data(b).find("segment_ids has 2 entries for 5 tokens"), std::string::npos);
}

// What colocated attention runs under a per-document mask: the tasks of each whole
// document, as tasks_for_documents builds them from the batch's mask data.
TEST(Packing, LocalTasksCarryPrefixesAndSegments) {
  auto src = synthetic(DocLengthDist::uniform, 90, 5);
  for (const DocStructure st : {DocStructure{0.4, 0}, DocStructure{0.25, 3}}) {
    SequencePacker packer(*src, 128, st);
    const PackedBatch b = packer.sequence(2);
    const LocalBatch local = whole_sequence(b);
    const AttentionMask mask{st.answers > 0 ? MaskKind::shared_question : MaskKind::prefix_lm};
    std::vector<AttentionTask> got;
    local.local_tasks(got, mask);
    const std::vector<AttentionTask> want = tasks_for_documents(b.cu_seqlens, {b.prefix_lens, b.segment_ids});
    ASSERT_EQ(got.size(), want.size());
    ASSERT_GE(got.size(), size_t(b.num_docs()));
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].q_row, want[i].q_row);
      EXPECT_EQ(got[i].q_len, want[i].q_len);
      EXPECT_EQ(got[i].kv_len, want[i].kv_len);
      EXPECT_EQ(got[i].prefix_len, want[i].prefix_len);
      EXPECT_EQ(got[i].segment_pos, want[i].segment_pos);
    }
    EXPECT_EQ(local.attention_pairs(mask), attention_pairs(want, mask));
    EXPECT_NE(local.attention_pairs(mask), local.attention_pairs()) << "the mask changes the work";
  }
}

TEST(Packing, CheckCuSeqlensNamesTheProblem) {
  EXPECT_NE(check_cu_seqlens(std::vector<int32_t>{1, 5}, 5).find("cu_seqlens[0]"), std::string::npos);
  EXPECT_NE(check_cu_seqlens(std::vector<int32_t>{0, 3, 3, 5}, 5).find("strictly increasing"), std::string::npos);
  EXPECT_NE(check_cu_seqlens(std::vector<int32_t>{0, 4}, 5).find("ends at 4"), std::string::npos);
  EXPECT_EQ(check_cu_seqlens(std::vector<int32_t>{0, 2, 5}, 5), "");
}

TEST(Synthetic, RetrievalAnswersAreTheValuesOfEarlierKeys) {
  auto src = synthetic(DocLengthDist::fixed, 400);
  std::vector<int32_t> tok(400);
  std::vector<uint8_t> ans(400);
  src->doc_tokens(7, 0, 400, tok.data(), ans.data());
  EXPECT_EQ(tok[0], synthetic_ids::bos);
  int answers = 0;
  for (int t = 0; t < 399; ++t) {
    if (!ans[size_t(t)]) continue;
    ++answers;
    // tok[t] is a key; its value in the pair section must equal tok[t + 1]
    bool found = false;
    for (int p = 1; p + 1 < 40; p += 2)
      if (tok[size_t(p)] == tok[size_t(t)]) found = tok[size_t(p + 1)] == tok[size_t(t + 1)];
    EXPECT_TRUE(found) << "position " << t;
  }
  EXPECT_EQ(answers, 8);
  // a slice equals the same range of the whole document
  std::vector<int32_t> part(50);
  src->doc_tokens(7, 333, 50, part.data(), nullptr);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), tok.begin() + 333));
}

TEST(Synthetic, TooSmallVocabularyIsAnError) {
  SyntheticOptions o;
  o.vocab_size = 20;
  o.lengths = {DocLengthDist::fixed, 1, 10, 0};
  EXPECT_THROW(make_synthetic_source(o), std::invalid_argument);
}

PasskeyOptions passkey_options(int64_t length, double depth, uint64_t seed = 5) {
  PasskeyOptions o;
  o.seed = seed;
  o.depth = depth;
  o.lengths = {DocLengthDist::fixed, length, length, seed};
  return o;
}

// The document reads as the format says: introduction, filler, the key line at a
// sentence start, the question, and the five digits, which the answer mask marks.
TEST(Passkey, DocumentsHoldTheKeyAndEndWithItsDigits) {
  const int64_t L = 1000;
  auto src = make_passkey_source(passkey_options(L, -1));
  EXPECT_EQ(src->vocab_required(), 256);
  for (int64_t i = 0; i < 20; ++i) {
    const PasskeyDocument d = passkey_document(passkey_options(L, -1), i);
    ASSERT_EQ(int64_t(d.text.size()), L);
    ASSERT_EQ(d.key.size(), 5u);
    EXPECT_GE(std::stoi(d.key), 10000);
    EXPECT_EQ(d.text.substr(size_t(d.key_begin), 21), "\nThe pass key is " + d.key.substr(0, 4));
    EXPECT_EQ(d.text.substr(size_t(d.answer_begin)), d.key);
    EXPECT_EQ(d.text.substr(size_t(d.answer_begin) - 16, 16), "The pass key is ");
    EXPECT_EQ(d.text.find("The pass key is " + d.key), size_t(d.key_begin) + 1);
    // the filler before the key line ends a sentence
    const char before = d.text[size_t(d.key_begin) - 1];
    EXPECT_TRUE(before == ' ' || before == '\n') << int(before);
    std::vector<int32_t> tok(static_cast<size_t>(L));
    std::vector<uint8_t> ans(static_cast<size_t>(L));
    src->doc_tokens(i, 0, L, tok.data(), ans.data());
    for (int64_t t = 0; t < L; ++t) {
      EXPECT_EQ(tok[size_t(t)], int32_t(static_cast<unsigned char>(d.text[size_t(t)])));
      // marked: the tokens whose next token is an answer digit
      EXPECT_EQ(ans[size_t(t)], t >= d.answer_begin - 1 && t < L - 1 ? 1 : 0) << t;
    }
    // a slice is the same range of the whole document
    std::vector<int32_t> part(77);
    src->doc_tokens(i, 500, 77, part.data(), nullptr);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), tok.begin() + 500));
  }
}

// A fixed depth puts the key line at the last sentence start at or before depth x
// filler; uniform depths cover the filler.
TEST(Passkey, DepthPlacesTheKeyLine) {
  const int64_t L = 4000, fill = L - passkey_min_length();
  for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const PasskeyDocument d = passkey_document(passkey_options(L, depth), 3);
    EXPECT_LE(d.depth, depth + 1e-12);
    EXPECT_GE(d.depth, depth - 200.0 / double(fill)) << depth;  // a filler sentence is < 200 bytes
  }
  EXPECT_EQ(passkey_document(passkey_options(L, 0.0), 3).depth, 0.0);
  double lo = 1, hi = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const double x = passkey_document(passkey_options(L, -1), i).depth;
    lo = std::min(lo, x), hi = std::max(hi, x);
  }
  EXPECT_LT(lo, 0.05);
  EXPECT_GT(hi, 0.9);
  // the shortest document has no filler at all
  const PasskeyDocument shortest = passkey_document(passkey_options(passkey_min_length(), 0.5), 0);
  EXPECT_EQ(int64_t(shortest.text.size()), passkey_min_length());
}

TEST(Passkey, RefusesWhatItCannotLayOut) {
  EXPECT_THROW(make_passkey_source(passkey_options(passkey_min_length() - 1, -1)), std::invalid_argument);
  EXPECT_THROW(make_passkey_source(passkey_options(1000, 1.5)), std::invalid_argument);
}

// Each copy document repeats one string whose length is in the stated range, drawn
// from the stated bytes; documents differ and are a pure function of (seed, index).
TEST(Copy, DocumentsRepeatOneStringOfTheStatedShape) {
  CopyOptions o;
  o.seed = 3;
  o.lengths = {DocLengthDist::uniform, 2, 700, 3};
  auto src = make_copy_source(o);
  EXPECT_EQ(src->vocab_required(), 256);
  EXPECT_FALSE(src->has_answers());
  std::set<std::string> periods;
  int64_t shortest = kCopyLongestPeriod, longest = kCopyShortestPeriod;
  for (int64_t i = 0; i < 300; ++i) {
    const std::string p = copy_period(o, i);
    EXPECT_EQ(p, copy_period(o, i));
    const int64_t P = int64_t(p.size());
    shortest = std::min(shortest, P), longest = std::max(longest, P);
    periods.insert(p);
    const int64_t L = src->doc_length(i);
    std::vector<int32_t> tok(static_cast<size_t>(L));
    std::vector<uint8_t> ans(static_cast<size_t>(L), 7);
    src->doc_tokens(i, 0, L, tok.data(), ans.data());
    for (int64_t t = 0; t < L; ++t) {
      EXPECT_GE(tok[size_t(t)], kCopyFirstByte);
      EXPECT_LE(tok[size_t(t)], kCopyLastByte);
      EXPECT_EQ(tok[size_t(t)], int32_t(static_cast<unsigned char>(p[size_t(t % P)])));
      EXPECT_EQ(ans[size_t(t)], 0);
    }
    if (L > 10) {  // a slice is the same range of the whole document
      std::vector<int32_t> part(static_cast<size_t>(L - 7));
      src->doc_tokens(i, 7, L - 7, part.data(), nullptr);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), tok.begin() + 7));
    }
  }
  EXPECT_EQ(shortest, kCopyShortestPeriod);
  EXPECT_EQ(longest, kCopyLongestPeriod);
  EXPECT_EQ(periods.size(), 300u);
}

// train.loss_on = answers keeps the targets of answer tokens only.
TEST(LossOn, AnswersKeepOnlyAnswerTargets) {
  auto src = make_passkey_source(passkey_options(600, -1));
  SequencePacker packer(*src, 1200);
  LocalBatch b = whole_sequence(packer.sequence(0));
  const int64_t all = b.num_targets();
  keep_answer_targets(b);
  EXPECT_EQ(b.num_targets(), 10);  // two documents, five digits each
  EXPECT_LT(b.num_targets(), all);
  for (size_t t = 0; t < b.targets.size(); ++t)
    if (b.targets[t] >= 0) {
      EXPECT_EQ(b.answer_mask[t], 1);
      EXPECT_TRUE(b.targets[t] >= '0' && b.targets[t] <= '9');
    }
  EXPECT_EQ(parse_loss_on("answers"), LossOn::answers);
  EXPECT_THROW(parse_loss_on("some"), std::invalid_argument);
}

TEST(DocLengths, DistributionsStayInRangeAndHaveTheirShape) {
  for (DocLengthDist d : {DocLengthDist::uniform, DocLengthDist::pile, DocLengthDist::prolong64k,
                          DocLengthDist::prolong512k, DocLengthDist::pretrain}) {
    DocLengthSampler s{d, 2, 4096, 11};
    std::vector<int64_t> v;
    for (int64_t i = 0; i < 20000; ++i) v.push_back(s.length(i));
    for (int64_t L : v) ASSERT_TRUE(L >= 2 && L <= 4096) << doc_length_dist_name(d);
    std::sort(v.begin(), v.end());
    const double median = double(v[v.size() / 2]);
    if (d == DocLengthDist::uniform) {
      EXPECT_NEAR(median, 2049, 150);
    }
    // pretrain (scaled from 128K to 4K): most documents fall in the 2K-8K source bins,
    // i.e. 64-256 tokens here; pile's median document (~250 tokens of 128K) is tiny
    if (d == DocLengthDist::pretrain) {
      EXPECT_TRUE(median > 40 && median < 200) << median;
    }
    if (d == DocLengthDist::pile) {
      EXPECT_LT(median, 20);
    }
  }
  EXPECT_EQ((DocLengthSampler{DocLengthDist::fixed, 1, 77, 0}.length(5)), 77);
  EXPECT_THROW(parse_doc_length_dist("zipf"), std::invalid_argument);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("lct_data_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const std::string& name, const std::string& content) {
    fs::create_directories((dir / name).parent_path());
    std::ofstream(dir / name, std::ios::binary) << content;
  }
  fs::path dir;
};

using TextSourceTest = TempDir;

TEST_F(TextSourceTest, FilesAreDocumentsAndSeparatorsSplitThem) {
  write("a.txt", "hello");
  write("sub/b.txt", "xy");
  write("empty.txt", "");
  auto src = make_text_source(dir.string(), "", 1);
  std::multiset<int64_t> lengths;
  for (int i = 0; i < 2; ++i) lengths.insert(src->doc_length(i));
  EXPECT_EQ(lengths, (std::multiset<int64_t>{2, 5}));  // one epoch visits each once
  EXPECT_EQ(src->vocab_required(), 256);

  write("c.txt", "ab||cde||||f");
  auto sep = make_text_source((dir / "c.txt").string(), "||", 1);
  std::multiset<int64_t> l2;
  for (int i = 0; i < 3; ++i) l2.insert(sep->doc_length(i));
  EXPECT_EQ(l2, (std::multiset<int64_t>{1, 2, 3}));
  int32_t buf[3];
  for (int i = 0; i < 3; ++i)
    if (sep->doc_length(i) == 3) {
      sep->doc_tokens(i, 0, 3, buf, nullptr);
      EXPECT_EQ(buf[0], 'c');
      EXPECT_EQ(buf[2], 'e');
    }
}

TEST_F(TextSourceTest, MissingOrEmptyInputIsAClearError) {
  try {
    make_text_source((dir / "nope").string(), "", 0);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos);
  }
  write("e.txt", "");
  try {
    make_text_source(dir.string(), "", 0);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no non-empty documents"), std::string::npos);
  }
}

// data.segment_end_id: a token file marks each document's structure. Under shared_question
// every mark closes a segment (the question, then each answer; the last answer runs to the
// document's end) and stays in it; under prefix_lm the first mark closes the prefix. A
// document cut by a sequence boundary keeps its segments' ids and its prefix's share.
TEST_F(TextSourceTest, TokenFileMarksSegments) {
  constexpr uint16_t M = 9;  // the mark; 0 separates documents
  const std::vector<uint16_t> ids = {5, 6, M, 7, 8, M, 3, 4, 0, 10, 11, 12, 0, M, 13, 14, 0};
  std::ofstream(dir / "m.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
  auto src = make_token_source((dir / "m.bin").string(), TokenDtype::uint16, 0, 3, M);
  for (const DocStructure::Marks marks : {DocStructure::Marks::segments, DocStructure::Marks::prefix}) {
    DocStructure st;
    st.marks = marks;
    SequencePacker packer(*src, 5, st);  // every sequence of 5 tokens cuts documents
    for (int64_t k = 0; k < 3; ++k) {  // one epoch: 8 + 3 + 3 tokens
      const PackedBatch b = packer.sequence(k);
      ASSERT_EQ(check_mask_data(b), "") << k;
      if (marks == DocStructure::Marks::segments) {
        ASSERT_EQ(b.segment_ids.size(), b.tokens.size());
        for (size_t t = 0; t < b.tokens.size(); ++t) {  // a mark is the last token of its segment
          if (b.tokens[t] == M && t + 1 < b.tokens.size() && b.positions[t + 1] > 0) {
            EXPECT_EQ(b.segment_ids[t + 1], b.segment_ids[t] + 1) << "sequence " << k << " token " << t;
          }
        }
      } else {
        ASSERT_EQ(b.prefix_lens.size(), size_t(b.num_docs()));
      }
    }
  }
  // the whole documents, one by one
  std::vector<int32_t> ends;
  int seen = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t L = src->doc_length(i);
    std::vector<int32_t> tok(static_cast<size_t>(L));
    src->doc_tokens(i, 0, L, tok.data(), nullptr);
    src->segment_ends(i, ends);
    DocStructure seg, pre;
    seg.marks = DocStructure::Marks::segments;
    pre.marks = DocStructure::Marks::prefix;
    PackedBatch b;
    seg.append_piece(b, L, 0, L, ends);
    pre.append_piece(b, L, 0, L, ends);
    if (tok[0] == 5) {  // 5 6 M | 7 8 M | 3 4
      EXPECT_EQ(ends, (std::vector<int32_t>{3, 6}));
      EXPECT_EQ(b.segment_ids, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 2, 2}));
      EXPECT_EQ(b.prefix_lens, std::vector<int32_t>{3});
      PackedBatch tail;  // the piece from offset 4
      seg.append_piece(tail, L, 4, 4, ends);
      pre.append_piece(tail, L, 4, 4, ends);
      EXPECT_EQ(tail.segment_ids, (std::vector<int32_t>{1, 1, 2, 2}));
      EXPECT_EQ(tail.prefix_lens, std::vector<int32_t>{0});
      ++seen;
    } else if (tok[0] == 10) {  // no mark: one question, no prefix
      EXPECT_TRUE(ends.empty());
      EXPECT_EQ(b.segment_ids, (std::vector<int32_t>{0, 0, 0}));
      EXPECT_EQ(b.prefix_lens, std::vector<int32_t>{0});
      ++seen;
    } else {  // M 13 14: a one-token question
      EXPECT_EQ(ends, std::vector<int32_t>{1});
      EXPECT_EQ(b.segment_ids, (std::vector<int32_t>{0, 1, 1}));
      EXPECT_EQ(b.prefix_lens, std::vector<int32_t>{1});
      ++seen;
    }
  }
  EXPECT_EQ(seen, 3);
  EXPECT_NE(src->describe().find("segments closed by id 9"), std::string::npos);
}

TEST_F(TextSourceTest, TokenFileSplitsOnSeparatorId) {
  const std::vector<uint32_t> ids = {5, 6, 0, 0, 7, 70000, 8, 0};
  std::ofstream(dir / "t.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 4));
  auto src = make_token_source((dir / "t.bin").string(), TokenDtype::uint32, 0, 2);
  std::multiset<int64_t> lengths = {src->doc_length(0), src->doc_length(1)};
  EXPECT_EQ(lengths, (std::multiset<int64_t>{2, 3}));
  EXPECT_EQ(src->vocab_required(), 70001);
  EXPECT_THROW(parse_token_dtype("int8"), std::invalid_argument);
  std::ofstream(dir / "odd.bin", std::ios::binary) << "abc";
  EXPECT_THROW(make_token_source((dir / "odd.bin").string(), TokenDtype::uint16, 0, 2), std::runtime_error);
}

// XXH64 against the reference implementation's values (xxhsum -H64 of Debian's xxhash
// 0.8.1 on these inputs), given whole and in pieces that cut the 32-byte stripes
// anywhere: content_hash compares ranks' inputs with it
TEST(Xxh64, MatchesTheReferenceWholeAndInPieces) {
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  const std::string zeros(100, '\0');
  const std::pair<std::string, uint64_t> known[] = {
      {"", 0xef46db3751d8e999ULL}, {"a", 0xd24ec4f1a98c6e5bULL},
      {zeros, 0x17bb1103c92c502fULL}, {alphabet, 0xd5000c4ac53d14a0ULL}};
  for (const auto& [text, want] : known) {
    Xxh64 whole;
    whole.update(text.data(), text.size());
    EXPECT_EQ(whole.digest(), want) << text.size() << " bytes";
    for (size_t piece : {1, 3, 7, 31, 33}) {
      Xxh64 h;
      for (size_t at = 0; at < text.size(); at += piece) h.update(text.data() + at, std::min(piece, text.size() - at));
      EXPECT_EQ(h.digest(), want) << text.size() << " bytes in pieces of " << piece;
    }
  }
}

#ifdef __SANITIZE_ADDRESS__
// Under AddressSanitizer the stripe loop checks its range once instead of at each load
// (data/files.cpp): a range past a buffer's end is still reported, in the stripes and in
// the tail
TEST(Xxh64, ARangePastTheBufferIsStillReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<char> bytes(64, 'x');
  EXPECT_DEATH(Xxh64().update(bytes.data(), 96), "heap-buffer-overflow");
  EXPECT_DEATH(Xxh64().update(bytes.data(), 70), "heap-buffer-overflow");
  EXPECT_DEATH(Xxh64().update(bytes.data() + 8, 64), "heap-buffer-overflow");
  Xxh64 inside;
  inside.update(bytes.data(), 64);  // the whole buffer, not a byte past it
}
#endif

}  // namespace
}  // namespace lct::data_test

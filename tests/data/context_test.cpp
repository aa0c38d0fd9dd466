// Context-parallel pieces that need no MPI: the sharding of packed sequences (every
// token owned once, positions and targets from the whole sequence, zigzag balance) and
// the merge of partial attention outputs over disjoint key ranges (mpi_context_parallel
// runs the placements themselves against one process).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "attention/core_attention.h"
#include "data/context_shards.h"
#include "data/key_runs.h"
#include "data/nano_batches.h"
#include "data/relay_rows.h"
#include "tests/test_util.h"

namespace lct::context_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using namespace test;

PackedBatch packed(std::vector<int32_t> lengths) {
  PackedBatch b;
  b.cu_seqlens = {0};
  int32_t t = 0;
  for (int32_t L : lengths) b.cu_seqlens.push_back(t += L);
  for (int32_t i = 0; i < t; ++i) b.tokens.push_back((i * 7 + 3) % 97);
  derive_targets_and_positions(b);
  b.answer_mask.assign(size_t(t), 0);
  for (int32_t i = 0; i < t; i += 5) b.answer_mask[size_t(i)] = 1;
  return b;
}

// 1-token documents, documents shorter than 2 cp, lengths off every chunk size, and
// (second batch) one document spanning the whole sequence.
const std::vector<std::vector<int32_t>> kBatches = {
    {1, 3, 57, 1, 1, 130, 7, 2, 40, 14}, {256}, {5, 251}, {2, 2, 2, 250},
    {7, 1}};  // short documents only: some ranks would get nothing

TEST(ContextShards, EveryTokenOwnedOnceWithItsPositionTargetAndMask) {
  for (const auto& lengths : kBatches)
    for (CpSplit split : {CpSplit::zigzag, CpSplit::contiguous})
      for (int cp : {1, 2, 3, 4, 8}) {
        const PackedBatch b = packed(lengths);
        std::vector<int> owners(size_t(b.num_tokens()), 0);
        int64_t targets = 0, pairs = 0;
        for (int r = 0; r < cp; ++r) {
          const LocalBatch l = shard_sequence(b, cp, r, split);
          ASSERT_EQ(int(l.group_pieces.size()), cp);
          ASSERT_EQ(l.pieces.size(), l.group_pieces[size_t(r)].size());
          int32_t row = 0, last_doc = -1;
          for (const DocPiece& p : l.pieces) {
            ASSERT_EQ(p.row, row);  // local rows are the pieces back to back
            ASSERT_GE(p.doc, last_doc);  // in document order
            last_doc = p.doc;
            ASSERT_EQ(p.doc_start, b.cu_seqlens[size_t(p.doc)]);
            ASSERT_EQ(p.doc_len, b.cu_seqlens[size_t(p.doc) + 1] - p.doc_start);
            for (int32_t i = 0; i < p.len; ++i) {
              const size_t seq = size_t(p.seq_row() + i), loc = size_t(p.row + i);
              ++owners[seq];
              ASSERT_EQ(l.tokens[loc], b.tokens[seq]);
              ASSERT_EQ(l.positions[loc], p.pos + i);
              ASSERT_EQ(l.positions[loc], b.positions[seq]);
              ASSERT_EQ(l.targets[loc], b.targets[seq]);  // derived before the split
              ASSERT_EQ(l.answer_mask[loc], b.answer_mask[seq]);
            }
            row += p.len;
          }
          ASSERT_EQ(l.num_tokens(), row);
          ASSERT_GT(l.num_tokens(), 0) << "rank " << r << " of " << cp << " holds no token";
          targets += l.num_targets();
          pairs += l.attention_pairs();
        }
        for (size_t t = 0; t < owners.size(); ++t) ASSERT_EQ(owners[t], 1) << "token " << t;
        EXPECT_EQ(targets, b.num_targets());  // counted once per sequence, not cp times
        EXPECT_EQ(pairs, attention_pairs(tasks_for_documents(b.cu_seqlens)));
      }
}

TEST(ContextShards, ZigzagKeepsChunksRAndMirrorAndShortDocumentsWhole) {
  const PackedBatch b = packed({1, 3, 100, 5});
  const int cp = 4;  // 2 cp = 8 chunks; documents of 1, 3 and 5 tokens stay whole
  const auto all = shard_pieces(b, cp, CpSplit::zigzag);
  std::set<int32_t> holders_of_short[4];
  for (int r = 0; r < cp; ++r)
    for (const DocPiece& p : all[size_t(r)]) {
      if (p.doc_len < 2 * cp) {
        EXPECT_EQ(p.pos, 0);
        EXPECT_EQ(p.len, p.doc_len);
        holders_of_short[p.doc].insert(r);
      }
    }
  for (int d : {0, 1, 3}) EXPECT_EQ(holders_of_short[d].size(), 1u);
  // the 100-token document: rank r holds [r*100/8, (r+1)*100/8) and the mirrored chunk
  for (int r = 0; r < cp; ++r) {
    std::vector<std::pair<int32_t, int32_t>> spans;
    for (const DocPiece& p : all[size_t(r)])
      if (p.doc == 2) spans.push_back({p.pos, p.pos + p.len});
    const auto cut = [](int c) { return int32_t(c * 100 / 8); };
    if (r == cp - 1) {  // chunks 3 and 4 are adjacent: one piece
      ASSERT_EQ(spans.size(), 1u);
      EXPECT_EQ(spans[0], std::make_pair(cut(3), cut(5)));
    } else {
      ASSERT_EQ(spans.size(), 2u);
      EXPECT_EQ(spans[0], std::make_pair(cut(r), cut(r + 1)));
      EXPECT_EQ(spans[1], std::make_pair(cut(7 - r), cut(8 - r)));
    }
  }
  // the first short document goes to the rank with the fewest tokens (rank 0, empty)
  EXPECT_EQ(*holders_of_short[0].begin(), 0);
  EXPECT_THROW(parse_cp_split("stripes"), std::invalid_argument);
}

TEST(ContextShards, ZigzagBalancesAttentionWorkContiguousDoesNot) {
  const PackedBatch b = packed({4096});
  for (int cp : {2, 4, 8}) {
    double zig_max = 0, zig_sum = 0, con_max = 0, con_sum = 0;
    for (int r = 0; r < cp; ++r) {
      const double z = double(shard_sequence(b, cp, r, CpSplit::zigzag).attention_pairs());
      const double c = double(shard_sequence(b, cp, r, CpSplit::contiguous).attention_pairs());
      zig_max = std::max(zig_max, z), zig_sum += z;
      con_max = std::max(con_max, c), con_sum += c;
    }
    EXPECT_LT(zig_max / (zig_sum / cp), 1.01) << cp;
    EXPECT_GT(con_max / (con_sum / cp), 1.0 + 0.4 * (cp - 1) / cp) << cp;  // last rank: (2cp-1)/cp
  }
}

// Under a mask the zigzag chunks hold equal shares of the work: unmasked pairs plus
// each token's token-linear work in pair units. Pairs alone (weight 0): a sliding
// window's or sinks' cheap first chunk, or a chunked mask's blocks, would otherwise
// unbalance the ranks (equal-token chunks give pairs max/mean 1.05 to 1.22 on these
// documents); with a weight, pairs + weight x tokens balance. Every row goes once.
TEST(ContextShards, ZigzagBalancesTheMasksWork) {
  const PackedBatch b = packed({8192, 3000, 5});
  for (const AttentionMask mask : {AttentionMask{MaskKind::sliding_window, 1024, 0, 1},
                                   AttentionMask{MaskKind::sink_window, 512, 4, 1}, AttentionMask{MaskKind::chunked, 1, 0, 1500}})
    for (const double weight : {0.0, 1416.0})
      for (int cp : {2, 4}) {
        double mx = 0, sum = 0, equal_tokens_max = 0;
        int64_t rows = 0, pairs = 0;
        const auto work = [&](const LocalBatch& l) { return double(l.attention_pairs(mask)) + weight * double(l.num_tokens()); };
        for (int r = 0; r < cp; ++r) {
          const LocalBatch l = shard_sequence(b, cp, r, CpSplit::zigzag, {mask, weight});
          mx = std::max(mx, work(l)), sum += work(l);
          equal_tokens_max = std::max(equal_tokens_max, work(shard_sequence(b, cp, r, CpSplit::zigzag)));
          rows += l.num_tokens();
          pairs += l.attention_pairs(mask);
        }
        EXPECT_EQ(rows, b.num_tokens());
        EXPECT_EQ(pairs, attention_pairs(tasks_for_documents(b.cu_seqlens), mask));
        EXPECT_LT(mx / (sum / cp), 1.01) << mask_kind_name(mask.kind) << " weight " << weight << " cp " << cp
                                          << " (equal tokens: " << equal_tokens_max / (sum / cp) << ")";
      }
}

// prefix_lm and shared_question under context parallelism: pieces carry their
// document's prefix (or question length), a piece never spans two segments and knows
// where its segment starts, the ranks' pairs add up to the sequence's, every row goes
// once, and the zigzag cuts balance the mask's work with the documents' own structure.
TEST(ContextShards, PiecesCarryPrefixesAndSegments) {
  PackedBatch b = packed({700, 3000, 5, 9, 1200});
  const DocStructure prefixes{0.3, 0}, segments{0.2, 3};
  for (const DocStructure st : {prefixes, segments}) {
    b.prefix_lens.clear();
    b.segment_ids.clear();
    for (int64_t d = 0; d < b.num_docs(); ++d) {
      const int32_t L = b.cu_seqlens[size_t(d + 1)] - b.cu_seqlens[size_t(d)];
      st.append_piece(b, L, 0, L);
    }
    ASSERT_EQ(check_mask_data(b), "");
    const AttentionMask mask{st.answers > 0 ? MaskKind::shared_question : MaskKind::prefix_lm};
    const int64_t whole = attention_pairs(tasks_for_documents(b.cu_seqlens, {b.prefix_lens, b.segment_ids}), mask);
    ASSERT_NE(whole, attention_pairs(tasks_for_documents(b.cu_seqlens))) << "the structure changes the work";
    EXPECT_EQ(whole_sequence(b).attention_pairs(mask), whole);
    for (const CpSplit split : {CpSplit::zigzag, CpSplit::contiguous})
      for (int cp : {2, 3, 4}) {
        int64_t rows = 0, pairs = 0;
        double mx = 0, sum = 0;
        for (int r = 0; r < cp; ++r) {
          const LocalBatch l = shard_sequence(b, cp, r, split, {mask, 0.0});
          for (const DocPiece& p : l.pieces) {
            const int32_t start = b.cu_seqlens[size_t(p.doc)];
            if (st.answers == 0) {
              EXPECT_EQ(p.prefix_len, b.prefix_lens[size_t(p.doc)]);
              continue;
            }
            int32_t question = 0;
            while (question < p.doc_len && b.segment_ids[size_t(start + question)] == 0) ++question;
            EXPECT_EQ(p.prefix_len, question);
            const int32_t id = b.segment_ids[size_t(start + p.pos)];
            for (int32_t t = p.pos; t < p.end(); ++t)
              ASSERT_EQ(b.segment_ids[size_t(start + t)], id) << "a piece spans two segments";
            EXPECT_EQ(l.segment_ids[size_t(p.row)], id);
            EXPECT_TRUE(p.segment_pos == 0 ? id == 0 : b.segment_ids[size_t(start + p.segment_pos - 1)] != id);
            for (int32_t t = p.segment_pos; t < p.pos; ++t) EXPECT_EQ(b.segment_ids[size_t(start + t)], id);
          }
          rows += l.num_tokens();
          pairs += l.attention_pairs(mask);
          mx = std::max(mx, double(l.attention_pairs(mask))), sum += double(l.attention_pairs(mask));
        }
        EXPECT_EQ(rows, b.num_tokens());
        EXPECT_EQ(pairs, whole) << mask_kind_name(mask.kind) << " cp " << cp;
        if (split == CpSplit::zigzag) {
          EXPECT_LT(mx / (sum / cp), 1.01) << mask_kind_name(mask.kind) << " cp " << cp;
        }
      }
  }
}

// data/key_runs.h: the rows of a holder's pieces a reader's queries read, against every
// query's mask_keys one by one (a difference array over each document), for every mask,
// both splits and cp 2 to 4: every key read travels, nothing else does, runs are merged,
// disjoint, in the holder's row order, at the holder's rows (a run may span consecutive
// pieces: shared_question's segments).
TEST(KeyRuns, ExactlyTheKeysSomeQueryReads) {
  struct Case {
    AttentionMask mask;
    DocStructure st;
  };
  const std::vector<Case> cases = {
      {{MaskKind::causal}, {}},
      {{MaskKind::sliding_window, 37}, {}},
      {{MaskKind::sink_window, 16, 5}, {}},
      {{MaskKind::chunked, 0, 0, 40}, {}},
      {{MaskKind::prefix_lm}, {0.3, 0}},
      {{MaskKind::shared_question}, {0.2, 3}},
      {{MaskKind::full_document}, {}},
      {{MaskKind::bidirectional_window, 37}, {}},
      {{MaskKind::causal_blockwise, 0, 0, 40}, {}},
  };
  for (const Case& c : cases) {
    PackedBatch b = packed({700, 3000, 5, 9, 1200});
    if (c.mask.per_document()) {
      for (int64_t d = 0; d < b.num_docs(); ++d) {
        const int32_t L = b.cu_seqlens[size_t(d + 1)] - b.cu_seqlens[size_t(d)];
        c.st.append_piece(b, L, 0, L);
      }
      ASSERT_EQ(check_mask_data(b), "");
    }
    for (const CpSplit split : {CpSplit::zigzag, CpSplit::contiguous})
      for (int cp : {2, 3, 4}) {
        std::vector<std::vector<DocPiece>> group;
        for (int r = 0; r < cp; ++r) group.push_back(shard_sequence(b, cp, r, split, {c.mask, 0.0}).pieces);
        for (int reader = 0; reader < cp; ++reader) {
          // read[row of the sequence]: some query of the reader reads it
          std::vector<int> diff(size_t(b.num_tokens()) + 1, 0);
          for (const DocPiece& p : group[size_t(reader)])
            for (int32_t i = p.pos; i < p.end(); ++i) {
              MaskKeys k = mask_keys(c.mask, p.prefix_len, p.segment_pos, i);
              k.hi = std::min<int64_t>(k.hi, p.doc_len);  // the masks that read ahead stop at the document's end
              ++diff[size_t(p.doc_start)], --diff[size_t(p.doc_start + k.sink_end)];
              ++diff[size_t(p.doc_start + k.lo)], --diff[size_t(p.doc_start + k.hi)];
            }
          std::vector<bool> read(size_t(b.num_tokens()));
          for (int64_t t = 0, run = 0; t < b.num_tokens(); ++t) read[size_t(t)] = (run += diff[size_t(t)]) > 0;
          for (int holder = 0; holder < cp; ++holder) {
            const std::string where = std::string(mask_kind_name(c.mask.kind)) + " cp " + std::to_string(cp) +
                                      " holder " + std::to_string(holder) + " reader " + std::to_string(reader);
            std::vector<KeyRun> runs;
            read_runs(group[size_t(holder)], group[size_t(reader)], c.mask, runs);
            std::vector<bool> sent(size_t(b.num_tokens()));
            int32_t last_row = -1;
            for (const KeyRun& r : runs) {
              ASSERT_GT(r.len, 0) << where;
              ASSERT_GE(r.row, last_row) << where << ": runs out of row order";
              last_row = r.row + r.len;
              bool someone = false;
              for (const DocPiece& p : group[size_t(reader)]) someone = someone || reads(p, r, c.mask);
              EXPECT_TRUE(someone) << where;
              for (int32_t t = r.pos; t < r.end(); ++t) {
                ASSERT_FALSE(sent[size_t(r.doc_start + t)]) << where << ": a row sent twice";
                sent[size_t(r.doc_start + t)] = true;
              }
            }
            for (size_t i = 1; i < runs.size(); ++i)
              EXPECT_FALSE(runs[i].doc == runs[i - 1].doc && runs[i].pos == runs[i - 1].end() &&
                           runs[i].row == runs[i - 1].row + runs[i - 1].len)
                  << where << ": two runs not merged";
            for (const DocPiece& h : group[size_t(holder)])
              for (int32_t t = h.pos; t < h.end(); ++t) {
                ASSERT_EQ(sent[size_t(h.doc_start + t)], bool(read[size_t(h.doc_start + t)])) << where << " position " << t;
              }
            for (const KeyRun& r : runs)  // at the holder's rows (a run may span consecutive pieces)
              for (int32_t t = r.pos; t < r.end(); ++t) {
                const auto h = std::find_if(group[size_t(holder)].begin(), group[size_t(holder)].end(),
                                            [&](const DocPiece& p) { return p.doc == r.doc && p.pos <= t && t < p.end(); });
                ASSERT_NE(h, group[size_t(holder)].end()) << where;
                ASSERT_EQ(r.row + (t - r.pos), h->row + (t - h->pos)) << where;
              }
          }
        }
      }
  }
}

// Issue 58's bound: under a window of W keys over one T-token document split zigzag
// over cp ranks, each rank sends at most (W + T / cp) / T of what it sends under causal
// (here 4,096 over 65,536 tokens on 4 ranks: 0.3125).
TEST(KeyRuns, AWindowMovesAtMostWPlusAShareOfCausal) {
  const PackedBatch b = packed({65536});
  const int cp = 4;
  const int32_t W = 4096;
  const AttentionMask causal{}, window{MaskKind::sliding_window, W};
  const auto rows_sent = [&](const AttentionMask& mask) {
    std::vector<std::vector<DocPiece>> group;
    for (int r = 0; r < cp; ++r) group.push_back(shard_sequence(b, cp, r, CpSplit::zigzag, {mask, 0.0}).pieces);
    std::vector<int64_t> rows;
    KeyExchange x;
    for (int r = 0; r < cp; ++r) x.plan(group, r, mask), rows.push_back(x.rows_to());
    return rows;
  };
  const std::vector<int64_t> c = rows_sent(causal), w = rows_sent(window);
  const double bound = double(W + 65536 / cp) / 65536.0;
  for (int r = 0; r < cp; ++r) {
    EXPECT_GT(c[size_t(r)], 0);
    EXPECT_LE(double(w[size_t(r)]), bound * double(c[size_t(r)])) << "rank " << r;
  }
}

// The double ring's relay (data/relay_rows.h): every hop carries exactly the rows of its
// block that the ranks still to come read (simulated hop by hop: what a rank holds after
// a hop is what it got, and it must hold every row it reads), the two ends of every hop
// and of every accumulator pass agree, the accumulator carries every row read so far,
// and under a window the relay moves less than whole blocks.
TEST(RelayRows, EachHopCarriesWhatTheRanksAheadRead) {
  using Rows = std::vector<char>;  // [row of a block]: in the set
  for (const AttentionMask& mask : {AttentionMask{}, AttentionMask{MaskKind::sliding_window, 37},
                                    AttentionMask{MaskKind::chunked, 0, 0, 40}, AttentionMask{MaskKind::full_document}})
    for (const auto& [cp, inner] : std::vector<std::pair<int, int>>{{4, 2}, {6, 3}, {6, 2}, {4, 4}, {8, 2}}) {
      const PackedBatch b = packed({700, 3000, 5, 9, 1200});
      std::vector<std::vector<DocPiece>> group;
      for (int r = 0; r < cp; ++r) group.push_back(shard_sequence(b, cp, r, CpSplit::zigzag, {mask, 0.0}).pieces);
      std::vector<RelayPlan> plans;
      for (int r = 0; r < cp; ++r) plans.push_back(plan_relay(group, inner, r, mask));
      const int outer = cp / inner;
      const auto rank = [&](int g, int u) { return ((g % outer + outer) % outer) * inner + (u % inner + inner) % inner; };
      const auto block_rows = [&](int j) {
        int64_t n = 0;
        for (const DocPiece& x : group[size_t(j)]) n += x.len;
        return n;
      };
      std::vector<std::vector<Rows>> read(static_cast<size_t>(cp));  // [r][j]: rows of j's block r reads
      for (int r = 0; r < cp; ++r)
        for (int j = 0; j < cp; ++j) {
          Rows x(size_t(block_rows(j)), 0);
          std::vector<KeyRun> runs;
          read_runs(group[size_t(j)], group[size_t(r)], mask, runs);
          for (const KeyRun& k : runs) std::fill_n(x.begin() + k.row, k.len, 1);
          read[size_t(r)].push_back(std::move(x));
        }
      const auto rows = [&](const RowSpans& s, int j) {
        Rows out(size_t(block_rows(j)), 0);
        for (const auto& [a, c] : s) std::fill(out.begin() + a, out.begin() + c, 1);
        return out;
      };
      const auto unite = [](Rows& into, const Rows& x) {
        for (size_t t = 0; t < x.size(); ++t) into[t] |= x[t];
      };
      const auto within = [](const Rows& x, const Rows& in) {  // x is a subset of in
        for (size_t t = 0; t < x.size(); ++t)
          if (x[t] && !in[t]) return false;
        return true;
      };
      const std::string where = std::string(mask_kind_name(mask.kind)) + " cp " + std::to_string(cp) + " inner " +
                                std::to_string(inner);
      int64_t relayed = 0, whole = 0;
      for (int r = 0; r < cp; ++r) {
        const int g = r / inner, u = r % inner;
        const RelayPlan& p = plans[size_t(r)];
        for (int s = 0; s < cp; ++s) {
          const RelayStep& st = p.steps[size_t(s)];
          const int j = st.block, o = s / inner, i = s % inner;
          ASSERT_EQ(j, rank(g - o, u - i)) << where;
          const Rows arrived = s > 0 ? rows(st.arrive, j) : Rows(size_t(block_rows(j)), 1);
          ASSERT_TRUE(within(read[size_t(r)][size_t(j)], arrived)) << where << " rank " << r << " step " << s;
          if (st.inner) {  // the receiver's arrival is this hop; it carries what (g, u + 1 ...) read
            EXPECT_EQ(plans[size_t(rank(g, u + 1))].steps[size_t(s + 1)].arrive, st.inner_rows) << where;
            Rows ahead(size_t(block_rows(j)), 0);
            for (int t = 1; t < inner - i; ++t) unite(ahead, read[size_t(rank(g, u + t))][size_t(j)]);
            EXPECT_EQ(rows(st.inner_rows, j), ahead) << where;
            EXPECT_TRUE(within(ahead, arrived)) << where << ": forwards a row it lacks";
            relayed += rows_in(st.inner_rows), whole += block_rows(j);
          }
          if (st.outer) {
            EXPECT_EQ(plans[size_t(rank(g + 1, u))].steps[size_t(s + inner)].arrive, st.outer_rows) << where;
            Rows ahead(size_t(block_rows(j)), 0);
            for (int a = 1; a < outer - o; ++a)
              for (int v = 0; v < inner; ++v) unite(ahead, read[size_t(rank(g + a, v))][size_t(j)]);
            EXPECT_EQ(rows(st.outer_rows, j), ahead) << where;
            EXPECT_TRUE(within(ahead, arrived)) << where << ": forwards a row it lacks";
            relayed += rows_in(st.outer_rows), whole += block_rows(j);
          }
          // the accumulator: the rows every visitor so far but the owner read, and the next visitor expects them
          Rows acc(size_t(block_rows(j)), 0);
          for (int t = 1; t <= s; ++t) unite(acc, read[size_t(rank(j / inner + t / inner, j % inner + t % inner))][size_t(j)]);
          EXPECT_EQ(rows(st.acc_send, j), acc) << where;
          if (s + 1 < cp)
            EXPECT_EQ(plans[size_t(rank(j / inner + (s + 1) / inner, j % inner + (s + 1) % inner))].steps[size_t(s + 1)].acc_arrive,
                      st.acc_send) << where;
          else
            EXPECT_EQ(plans[size_t(j)].home, st.acc_send) << where;
        }
      }
      if (mask.kind == MaskKind::sliding_window || mask.kind == MaskKind::chunked) EXPECT_LT(relayed, whole) << where;
    }
}

TEST(ContextShards, WholeSequenceIsOnePiecePerDocument) {
  const PackedBatch b = packed({3, 1, 60});
  const LocalBatch l = whole_sequence(b);
  ASSERT_EQ(l.pieces.size(), 3u);
  EXPECT_EQ(l.pieces[2].row, 4);
  EXPECT_EQ(l.pieces[2].len, 60);
  EXPECT_EQ(l.tokens, b.tokens);
  EXPECT_EQ(l.attention_pairs(), attention_pairs(tasks_for_documents(b.cu_seqlens)));
}

// Ping-pong halves: every document in exactly one half, whole and in its original order,
// with its rows, targets, positions and mask; tokens balanced longest-first; a
// one-document batch leaves the second half empty; context-parallel shards split by
// document the same way on every rank of the group.
TEST(NanoBatches, WholeDocumentsSplitByTokens) {
  for (const auto& lengths : kBatches) {
    const PackedBatch b = packed(lengths);
    const LocalBatch whole = whole_sequence(b);
    const std::array<LocalBatch, 2> halves = split_nano_batches(whole);
    std::multiset<std::vector<int32_t>> seen;
    int64_t pairs = 0;
    for (const LocalBatch& h : halves) {
      int32_t row = 0, last_start = -1;
      for (const DocPiece& p : h.pieces) {
        EXPECT_EQ(p.row, row);
        EXPECT_EQ(p.pos, 0);
        EXPECT_EQ(p.len, p.doc_len);
        // original order kept: find the document's rows in the whole batch by content
        const auto& src = *std::find_if(whole.pieces.begin(), whole.pieces.end(),
                                        [&](const DocPiece& w) {
                                          return std::equal(h.tokens.begin() + p.row,
                                                            h.tokens.begin() + p.row + p.len,
                                                            whole.tokens.begin() + w.row) &&
                                                 w.len == p.len;
                                        });
        EXPECT_GT(src.row, last_start);
        last_start = src.row;
        for (int32_t i = 0; i < p.len; ++i) {
          EXPECT_EQ(h.targets[size_t(row + i)], whole.targets[size_t(src.row + i)]);
          EXPECT_EQ(h.positions[size_t(row + i)], whole.positions[size_t(src.row + i)]);
          EXPECT_EQ(h.answer_mask[size_t(row + i)], whole.answer_mask[size_t(src.row + i)]);
        }
        seen.insert(std::vector<int32_t>(h.tokens.begin() + p.row, h.tokens.begin() + p.row + p.len));
        row += p.len;
      }
      EXPECT_EQ(h.num_tokens(), row);
      EXPECT_EQ(h.sequence_tokens, row);
      pairs += h.attention_pairs();
    }
    EXPECT_EQ(seen.size(), whole.pieces.size());
    EXPECT_EQ(pairs, whole.attention_pairs());
    // longest-first to the lighter half: the halves differ by at most the longest document
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    EXPECT_LE(std::abs(halves[0].num_tokens() - halves[1].num_tokens()), longest);
  }
  EXPECT_EQ(split_nano_batches(whole_sequence(packed({256})))[1].num_tokens(), 0);
  const std::array<LocalBatch, 2> even = split_nano_batches(whole_sequence(packed({10, 30, 20, 20})));
  EXPECT_EQ(even[0].num_tokens(), 40);  // 30 + 10
  EXPECT_EQ(even[1].num_tokens(), 40);  // 20 + 20
  // context-parallel shards: every rank of the group puts a document in the same half
  // and keeps exactly its own pieces of it
  for (const auto& lengths : kBatches)
    for (int cp : {2, 3}) {
      const PackedBatch b = packed(lengths);
      std::map<int32_t, int> half_of;
      std::array<int64_t, 2> tokens = {0, 0};
      for (int r = 0; r < cp; ++r) {
        const LocalBatch shard = shard_sequence(b, cp, r, CpSplit::zigzag);
        const std::array<LocalBatch, 2> halves = split_nano_batches(shard);
        int64_t rows = 0;
        for (int h = 0; h < 2; ++h) {
          ASSERT_EQ(halves[size_t(h)].group_pieces.size(), size_t(cp));
          EXPECT_EQ(halves[size_t(h)].group_pieces[size_t(r)].size(), halves[size_t(h)].pieces.size());
          for (const DocPiece& p : halves[size_t(h)].pieces) {
            const auto [it, added] = half_of.emplace(p.doc, h);
            EXPECT_EQ(it->second, h) << "document " << p.doc << " in two halves";
          }
          rows += halves[size_t(h)].num_tokens();
          if (r == 0) tokens[size_t(h)] = halves[size_t(h)].sequence_tokens;
          EXPECT_EQ(halves[size_t(h)].sequence_tokens, tokens[size_t(h)]);
        }
        EXPECT_EQ(rows, shard.num_tokens());
      }
      EXPECT_EQ(tokens[0] + tokens[1], b.num_tokens());
    }
}

AttentionParams small_params() {
  AttentionParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 16;
  p.scale = 0.25f;
  return p;
}

// One 90-token document: queries [40, 90) against all keys in one call, against keys
// split into three disjoint ranges (merged in order), and the merge of parts in which
// some rows see no key at all.
TEST(AttentionMerge, PartialsOverDisjointKeyRangesMergeToTheWhole) {
  const AttentionParams p = small_params();
  const int64_t T = 90, H = 4, hd = 16, w = 2 * 16;
  const std::vector<float> q = random_vector(T * H * hd, 1), k = random_vector(T * w, 2),
                           v = random_vector(T * w, 3);
  const int32_t q0 = 40, qn = 50;
  std::vector<float> o_all(size_t(T * H * hd), 0), lse_all(size_t(T * H), 0);
  const AttentionTask whole{q0, 0, qn, int32_t(T), q0, 0, int32_t(T)};
  attention_forward(p, std::span(&whole, 1), q.data(), k.data(), v.data(), o_all.data(), lse_all.data());

  std::vector<float> o(size_t(T * H * hd), 0.0f), lse(size_t(T * H), -INFINITY);
  // key ranges [0, 30), [30, 65), [65, 90): the last is partly in the future of early
  // queries (rows 40..64 see none of it) and wholly for none
  for (auto [k0, kn] : {std::pair{0, 30}, {30, 35}, {65, 25}}) {
    std::vector<float> po(size_t(T * H * hd), 0.0f), pl(size_t(T * H), -INFINITY);
    const AttentionTask part{q0, k0, qn, kn, q0, k0, int32_t(T)};
    attention_forward(p, std::span(&part, 1), q.data(), k.data(), v.data(), po.data(), pl.data());
    merge_attention_partial(o.data(), lse.data(), po.data(), pl.data(), T, int(H), int(hd));
  }
  double worst = 0;
  for (int64_t i = q0 * H * hd; i < (q0 + qn) * H * hd; ++i)
    worst = std::max(worst, double(std::abs(o[size_t(i)] - o_all[size_t(i)])));
  for (int64_t i = q0 * H; i < (q0 + qn) * H; ++i)
    worst = std::max(worst, double(std::abs(lse[size_t(i)] - lse_all[size_t(i)])));
  EXPECT_LT(worst, 2e-6);
  // rows no part touched stay "no key": O = 0, LSE = -inf
  for (int64_t i = 0; i < q0 * H; ++i) EXPECT_EQ(lse[size_t(i)], -INFINITY);
  for (int64_t i = 0; i < q0 * H * hd; ++i) EXPECT_EQ(o[size_t(i)], 0.0f);
}

TEST(AttentionMerge, NoKeyRowsOnEitherSide) {
  const int H = 1, hd = 2;
  // row 0: both parts empty; row 1: only b; row 2: only a; row 3: both
  std::vector<float> o = {0, 0, 0, 0, 1, 2, 3, 4};
  std::vector<float> lse = {-INFINITY, -INFINITY, 0.5f, std::log(2.0f)};
  const std::vector<float> po = {9, 9, 5, 6, 9, 9, 7, 8};
  const std::vector<float> pl = {-INFINITY, 1.5f, -INFINITY, std::log(2.0f)};
  merge_attention_partial(o.data(), lse.data(), po.data(), pl.data(), 4, H, hd);
  EXPECT_EQ(lse[0], -INFINITY);
  EXPECT_EQ(o[0], 0.0f);
  EXPECT_EQ(o[1], 0.0f);
  EXPECT_FLOAT_EQ(lse[1], 1.5f);
  EXPECT_FLOAT_EQ(o[2], 5.0f);
  EXPECT_FLOAT_EQ(o[3], 6.0f);
  EXPECT_FLOAT_EQ(lse[2], 0.5f);
  EXPECT_FLOAT_EQ(o[4], 1.0f);
  EXPECT_FLOAT_EQ(lse[3], std::log(4.0f));  // equal weights: the average
  EXPECT_FLOAT_EQ(o[6], 5.0f);
  EXPECT_FLOAT_EQ(o[7], 6.0f);
}

}  // namespace
}  // namespace lct::context_test

// lct make-batch: packed sequences of the configured data stream into a batch file
// (what lct eval reads).
#include <limits>
#include <memory>
#include <stdexcept>

#include "data/packing.h"
#include "src/cli/command.h"
#include "src/io/batch_file.h"
#include "src/io/output_files.h"
#include "src/io/paths.h"
#include "src/train/memory_budget.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"
#include "src/util/log.h"

namespace lct {
namespace {

void write_batch_from_config(const Config& config, int64_t first, int64_t count,
                             const std::string& path) {
  // the stream addresses token k * seq_len of sequence k, and a batch file's offsets are
  // int32: both checked before anything is generated
  const int64_t seq_len = config.data.seq_len;
  if (first < 0 || count < 1 || first > std::numeric_limits<int64_t>::max() / seq_len - count)
    throw std::invalid_argument("make-batch: --first " + std::to_string(first) + " + --sequences " +
                                std::to_string(count) + " is beyond the stream's addressable range (" +
                                std::to_string(std::numeric_limits<int64_t>::max() / seq_len) +
                                " sequences of " + std::to_string(seq_len) + " tokens)");
  if (count > std::numeric_limits<int32_t>::max() / seq_len)
    throw std::invalid_argument("make-batch: --sequences " + std::to_string(count) + " x data.seq_len " +
                                std::to_string(seq_len) + " tokens exceeds a batch file's int32 offsets");
  // the packed tokens with their targets, positions and masks, and the file built in
  // memory with its image (src/io/h5io.h): about 40 bytes a token
  if (const std::string no = check_command_memory(
          "lct make-batch of " + std::to_string(count) + " x " + std::to_string(seq_len) + " tokens",
          40.0 * double(count) * double(seq_len), "the packed sequences and the file built in memory",
          "write fewer --sequences per file");
      !no.empty())
    throw std::invalid_argument(no);
  DocumentStream stream(make_run_plan(config, 1));
  const bool answers = stream.source().has_answers();
  PackedBatch all;  // the sequences, one after another
  all.cu_seqlens = {0};
  for (int64_t k = first; k < first + count; ++k) {
    const PackedBatch b = stream.sequence(k);
    const int32_t base = int32_t(all.tokens.size());
    all.tokens.insert(all.tokens.end(), b.tokens.begin(), b.tokens.end());
    all.prefix_lens.insert(all.prefix_lens.end(), b.prefix_lens.begin(), b.prefix_lens.end());
    all.segment_ids.insert(all.segment_ids.end(), b.segment_ids.begin(), b.segment_ids.end());
    if (answers) {
      if (b.answer_mask.empty()) all.answer_mask.insert(all.answer_mask.end(), b.tokens.size(), 0);
      else all.answer_mask.insert(all.answer_mask.end(), b.answer_mask.begin(), b.answer_mask.end());
    }
    for (size_t d = 1; d < b.cu_seqlens.size(); ++d) all.cu_seqlens.push_back(base + b.cu_seqlens[d]);
  }
  write_batch_file(path, all, answers, {stream.source().describe(), first, seq_len});
}

}  // namespace

Command add_make_batch_command(CLI::App& lct) {
  struct Options {
    ConfigOptions config;
    std::string out;
    int64_t sequences = 1, first = 0;
  };
  auto o = std::make_shared<Options>();
  CLI::App* make_batch = lct.add_subcommand(
      "make-batch", "write packed sequences of the configured data stream to a batch file");
  make_batch->add_option("--out", o->out, "batch file to write (tokens, cu_seqlens)")->required();
  make_batch->add_option("--sequences", o->sequences, "number of sequences of data.seq_len tokens")
      ->check(whole_integer())
      ->check(positive())
      ->capture_default_str();
  make_batch->add_option("--first", o->first, "index of the first sequence in the stream")
      ->check(whole_integer())
      ->check(non_negative())
      ->capture_default_str();
  add_config_options(make_batch, o->config);
  return {make_batch, [o] {
            const Config config = resolve_config(o->config);
            check_outputs({{"--out", o->out}}, config_inputs(config, o->config.file));
            write_batch_from_config(config, o->first, o->sequences, o->out);
            print_out("wrote {}: {} sequences of {} tokens from sequence {}\n", o->out, o->sequences,
                      config.data.seq_len, o->first);
            return 0;
          }};
}

}  // namespace lct

// Ranks that disagree stop together. Every rank of an MPI job (MPMD launches, or a
// config file that differs between hosts, give ranks different inputs) calls
// agree_across_ranks at the same point with its own error ("" when it has none) and the
// text it must share with the others ("name = value" lines: its effective config and
// run inputs). Rank 0 finds the first error (lowest rank) or the first line that differs
// from its own, and every rank then throws the same ConfigError: one line, exit 1 on
// every rank, never a rank left waiting in a collective.
#pragma once

#include <string>
#include <vector>

#include "src/config/sections.h"

namespace lct {

// Where the ranks run: every rank's host name (gethostname), in rank order. Messages
// name a rank's host only when the ranks span more than one.
struct RankHosts {
  std::vector<std::string> names;  // one per rank
  int count() const;               // distinct hosts
  std::string rank(int r) const;   // "rank 2", or "rank 2 (node2)" across hosts
  // "node1 (ranks 0-1), node2 (ranks 2-3)": each host with its ranks
  std::string describe() const;
};
// Collective over MPI_COMM_WORLD when world > 1 (this host alone otherwise).
RankHosts gather_rank_hosts(int world);

// Collective over MPI_COMM_WORLD when world > 1; otherwise throws the error, if any.
// Messages name the ranks' hosts when the job spans several.
void agree_across_ranks(const std::string& error, const std::string& text, int world);

// "lct binary = <content hash>\n": every rank must run the same build (hosts of a cluster
// each load their own copy of lct). The hash of /proc/self/exe, computed once.
std::string binary_identity_line();

// The "name = value" lines a training run's ranks must agree on: every config key
// (config_lines, config_key_lines in src/config/config.h), the content of the data file
// (or folder), of the checkpoint a resume starts from and of the Hugging Face folder a
// fresh run starts from (train.init_from).
std::string training_inputs_text(const std::string& config_lines, const std::string& data_path,
                                 const std::string& resume_checkpoint, const std::string& init_from = "");

}  // namespace lct

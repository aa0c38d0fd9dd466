// Ranks that disagree stop together. Every rank of an MPI job (MPMD launches, or a
// config file that differs between hosts, give ranks different inputs) calls
// agree_across_ranks at the same point with its own error ("" when it has none) and the
// text it must share with the others ("name = value" lines: its effective config and
// run inputs). Rank 0 finds the first error (lowest rank) or the first line that differs
// from its own, and every rank then throws the same ConfigError: one line, exit 1 on
// every rank, never a rank left waiting in a collective.
#pragma once

#include <string>

#include "src/config/sections.h"

namespace lct {

// Collective over MPI_COMM_WORLD when world > 1; otherwise throws the error, if any.
void agree_across_ranks(const std::string& error, const std::string& text, int world);

// The "name = value" lines a training run's ranks must agree on: every config key
// (config_lines, config_key_lines in src/config/config.h), the content of the data file
// (or folder) and of the checkpoint a resume starts from.
std::string training_inputs_text(const std::string& config_lines, const std::string& data_path,
                                 const std::string& resume_checkpoint);

}  // namespace lct

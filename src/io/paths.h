// Output paths never alias inputs: a command refuses, before writing anything, an output
// that is the same file as one of its inputs (compared by file identity, so links and
// different spellings of one path count) or the same path as another output.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lct {

// (what, path) pairs, e.g. {"--grads-out", "g.h5"}; empty paths are skipped. An input
// folder counts as every regular file under it (an output may not replace a file of an
// input folder, e.g. DIR/model.safetensors of the model being evaluated). Throws
// std::invalid_argument naming both.
using NamedPaths = std::vector<std::pair<std::string, std::string>>;
void refuse_aliasing(const NamedPaths& outputs, const NamedPaths& inputs);
// A run's other outputs (trace.path) and its inputs (--config, data.path) may not be a
// file the run keeps in its checkpoint folder `dir` (step_*.h5 and their temporaries,
// metrics.jsonl, run.toml, run.lock). Throws std::invalid_argument naming both.
void refuse_run_folder_file(const std::string& what, const std::string& path, const std::string& dir);

// The one rule for a command's output files, applied by every command that writes: before
// any work, none of `outputs` may be the same file as one of `inputs` or as another
// output (refuse_aliasing), and a file must be creatable beside each (require_writable_output;
// `make_folder` names the outputs whose missing folders are made, as trace.path's). An
// empty path is an output not given (an empty value on the command line is refused
// before this, by src/cli/dispatch.cpp). Throws one line naming the option
// (std::invalid_argument for an alias, std::runtime_error for a path it cannot write).
// lct export, whose --out is a folder it makes only once the model is read, refuses
// aliasing by refuse_aliasing and checks the folder's files where it writes them.
void check_outputs(const NamedPaths& outputs, const NamedPaths& inputs,
                   const std::vector<std::string>& make_folder = {});

}  // namespace lct

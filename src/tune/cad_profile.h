// Which cost model the CAD planner balances with (attention.cad_profile, src/config/sections.h):
//   auto     (default) this machine's measured kernel time: a cached cost model for the
//            model's attention (kernel, heads, KV heads, head dim), this CPU, BLAS and
//            thread count whose grid reaches the run's longest document piece (parallel/
//            cad_cost.h: cad_cost_grid), measured at start when there is none, the cached
//            one was measured for something else or for shorter tasks, and cached then;
//   pairs    attention pairs (no measurement: the cost of a pair is the same everywhere);
//            "" too, which configs written before "auto" hold;
//   a path   a cost model written by `lct bench --sections profile --profile-out`.
// Per-pair time varies several-fold with a task's shape (small tasks pay tile padding
// and per-task overhead), so balancing pairs leaves time unbalanced; hence "auto".
//
// The file (TOML; what `lct bench --sections profile --profile-out` writes, the cache
// holds and rank 0 sends the others):
//   cpu = "...", blas = "...", threads = 2      where it was measured
//   kernel = "causal", heads = 4, kv_heads = 2, head_dim = 64   for which attention
//   q_grid = [16, 64, ...], kv_grid = [16, 64, ...]             query and key rows
//   seconds_per_pair = [[...], ...]   one row per q_grid entry, one value per kv_grid entry
//
// The cache: $LCT_CACHE_DIR, else $XDG_CACHE_HOME/lct, else $HOME/.cache/lct; one text
// file per setup (cad_profile-<kernel>-h<H>-kv<KV>-d<hd>-t<threads>-<machine hash>.toml),
// written atomically. A cached file is used only when it parses, its recorded CPU,
// BLAS, threads, kernel and shape equal this run's and its grid reaches the run's longest
// task; otherwise it is measured again (on the run's grid) and replaced. Without a writable cache the model is measured and used uncached.
#pragma once

#include <optional>
#include <string>

#include "parallel/cad_cost.h"
#include "model/llama_config.h"
#include "src/config/sections.h"

namespace lct {

struct CadCostChoice {
  std::optional<CadCostModel> model;  // none: balance attention pairs
  std::string text;                  // the model as text ("" for pairs), to share over ranks
  std::string description;           // for the log: what is balanced and where it came from
};

// The file attention.cad_profile names ("" for auto and pairs).
inline std::string cad_profile_file(const CadProfile& setting) {
  return setting.kind == CadProfile::Kind::file ? setting.path : "";
}

// The cost model as TOML, and back: parse throws std::invalid_argument with one line
// naming `origin` and the problem.
std::string cad_cost_toml(const CadCostModel& m);
CadCostModel parse_cad_cost_toml(const std::string& text, const std::string& origin);

// Resolves attention.cad_profile for the model `m` on this process (threads: the
// OpenMP threads the run uses) for tasks of at most `longest` rows (longest_document_piece
// of the run's data). May measure (a few seconds) for "auto". A file whose grid stops
// short of `longest` is used with a warning. Throws ConfigError naming the key for an
// unreadable or mismatched file.
CadCostChoice resolve_cad_cost(const CadProfile& setting, const LlamaConfig& m, int64_t longest);
// The same choice on another rank, from resolve_cad_cost's text and description.
CadCostChoice cad_cost_from_text(const std::string& text, const std::string& description);

}  // namespace lct

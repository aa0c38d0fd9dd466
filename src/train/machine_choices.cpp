#include "src/train/machine_choices.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "parallel/collectives.h"
#include "src/tune/cad_profile.h"
#include "src/tune/gemm_choice.h"

namespace lct {
namespace {

// A choice that rank 0 makes and every rank receives: the strings `decide` returns, or
// one ConfigError on every rank (error_prefix + what()).
std::vector<std::string> decided_on_root(const ProcessGrid& grid, size_t count, const std::string& error_prefix,
                                         const std::function<std::vector<std::string>()>& decide) {
  std::vector<std::string> shared(count + 1);  // error, then decide's strings
  if (grid.is_root()) {
    try {
      const std::vector<std::string> made = decide();
      std::copy(made.begin(), made.end(), shared.begin() + 1);
    } catch (const std::exception& e) {
      shared[0] = error_prefix + e.what();
    }
  }
  const MPI_Comm world = grid.world_size() > 1 ? grid.world() : MPI_COMM_NULL;
  barrier_sleeping(world);
  broadcast_strings(shared, world);
  if (!shared[0].empty()) throw ConfigError(shared[0]);
  return std::vector<std::string>(shared.begin() + 1, shared.end());
}

}  // namespace

void resolve_machine_choices(RunPlan& plan, const ProcessGrid& grid) {
  MachineChoices m;
  {
    // (the products run on token tiles: their row count is a tile's, at most)
    const int64_t rows = std::min(plan.data.seq_len, plan.tile_tokens);
    const bool bf16 = plan.precision == Precision::bf16;
    const std::vector<std::string> shared = decided_on_root(grid, 4, "", [&] {
      const Fp32GemmChoice fp32 = resolve_fp32_gemm(plan.fp32_gemm, plan.model, rows);
      if (!bf16) return std::vector<std::string>{fp32_library_name(fp32.library), fp32.description, "", ""};
      const Bf16KernelChoice k = resolve_bf16_kernel(plan.bf16_kernel, plan.model, rows, fp32.library);
      return std::vector<std::string>{fp32_library_name(fp32.library), fp32.description, bf16_kernel_name(k.kernel),
                                      k.description};
    });
    m.fp32_library = parse_fp32_library(shared[0]);
    m.fp32_description = shared[1];
    if (bf16) {
      m.bf16_kernel = parse_bf16_kernel(shared[2]);
      m.bf16_description = shared[3];
    }
  }
  if (plan.placement == Placement::cad) {
    const std::vector<std::string> shared = decided_on_root(grid, 2, "", [&] {
      const CadCostChoice choice = resolve_cad_cost(plan.cad.profile, plan.model, longest_document_piece(plan.data));
      return std::vector<std::string>{choice.text, choice.description};  // cost model text, description
    });
    CadCostChoice cost = cad_cost_from_text(shared[0], shared[1]);
    m.cad_cost = std::move(cost.model);
    m.cad_cost_description = cost.description;
  }
  m.resolved = true;
  plan.machine = std::move(m);
}

}  // namespace lct

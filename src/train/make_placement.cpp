#include "src/train/make_placement.h"

#include <stdexcept>

#include "parallel/context_parallel.h"
#include "parallel/ulysses_attention.h"

namespace lct {

PlacementChoice make_placement(const RunPlan& plan, const ProcessGrid& grid) {
  PlacementChoice c;
  switch (plan.placement) {
    case Placement::cad: {
      if (!plan.machine.resolved) throw std::logic_error("make_placement: CAD needs the plan's machine choices");
      auto cad = std::make_unique<CadAttention>(grid.world(), plan.cad.tolerance, plan.machine.cad_cost,
                                                plan.cad.rank_speeds, plan.cad_align_every_cut, grid.cp());
      c.cad = cad.get();
      c.probed_bandwidth = cad->probe_bandwidth();
      c.placement = std::move(cad);
      break;
    }
    case Placement::context_parallel:
      if (plan.cp_comm == CpComm::ulysses || plan.cp_comm == CpComm::hybrid) {
        auto cp = std::make_unique<UlyssesAttention>(grid.cp(), plan.cp_ulysses);
        c.probed_bandwidth = cp->probe_bandwidth();
        c.placement = std::move(cp);
      } else {
        auto cp = std::make_unique<ContextParallelAttention>(grid.cp(), plan.cp_comm, plan.cp_inner_ring);
        c.probed_bandwidth = cp->probe_bandwidth();
        c.placement = std::move(cp);
      }
      break;
    case Placement::colocated:
      c.placement = std::make_unique<ColocatedAttention>();
      break;
  }
  return c;
}

}  // namespace lct

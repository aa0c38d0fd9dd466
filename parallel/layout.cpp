#include "parallel/layout.h"

#include <stdexcept>

#include "model/stage.h"

namespace lct {

std::string resolve_layout(const LayoutRequest& r, int world_size, int num_layers,
                           int64_t seq_len, Layout& layout) {
  const auto text = [](int64_t v) { return std::to_string(v); };
  const std::string factors = "parallel.dp = " + text(r.dp) + ", parallel.pp = " + text(r.pp) +
                              ", parallel.cp = " + text(r.cp);
  int inferred = 0;
  for (const auto& [name, v] : {std::pair{"parallel.dp", r.dp}, {"parallel.pp", r.pp},
                                {"parallel.cp", r.cp}}) {
    if (v == -1) {
      ++inferred;
    } else if (v < 1) {
      return std::string(name) + " must be a positive degree or -1 (infer), got " + text(v);
    }
  }
  if (inferred > 1) return "only one of parallel.dp/pp/cp may be -1 (infer); got " + factors;
  // products are checked: 2^63 / 7 x 7 must not wrap around to a small layout
  int64_t known = 1;
  for (int64_t v : {r.dp, r.pp, r.cp})
    if (v > 0 && __builtin_mul_overflow(known, v, &known))
      return "parallel.dp x parallel.pp x parallel.cp overflows (" + factors + ")";
  int64_t dp = r.dp, pp = r.pp, cp = r.cp;
  if (inferred == 1) {
    if (world_size % known != 0)
      return "cannot infer the -1 degree: the MPI world has " + text(world_size) +
             " ranks, not a multiple of the other degrees' product " + text(known) + " (" +
             factors + ")";
    const int64_t v = world_size / known;
    (dp == -1 ? dp : pp == -1 ? pp : cp) = v;
  }
  int64_t product = 0;
  if (__builtin_mul_overflow(dp, pp, &product) || __builtin_mul_overflow(product, cp, &product))
    return "parallel.dp x parallel.pp x parallel.cp overflows (" + factors + ")";
  if (product != world_size)
    return "parallel.dp x parallel.pp x parallel.cp = " + text(dp) + " x " + text(pp) + " x " +
           text(cp) + " = " + text(product) + " but the MPI world has " + text(world_size) +
           " rank" + (world_size == 1 ? "" : "s") + " (launch with mpirun -np " +
           text(product) + ", or set one degree to -1)";
  std::vector<StageSpec> stages;
  if (std::string e = split_pipeline_stages(num_layers, int(pp), r.pp_layers, stages); !e.empty())
    return e;
  if (cp > 1 && seq_len % (2 * cp) != 0)
    return "data.seq_len = " + text(seq_len) + " must be a multiple of 2 x parallel.cp = " +
           text(2 * cp) + " (load-balanced context-parallel split)";
  layout.dp = int(dp);
  layout.pp = int(pp);
  layout.cp = int(cp);
  return {};
}

GridCoordinates grid_coordinates(const Layout& l, int world_rank) {
  GridCoordinates c;
  c.cp_rank = world_rank % l.cp;
  c.dp_rank = (world_rank / l.cp) % l.dp;
  c.pp_rank = world_rank / (l.cp * l.dp);
  return c;
}

int world_rank_of(const Layout& l, const GridCoordinates& c) {
  return c.cp_rank + l.cp * (c.dp_rank + l.dp * c.pp_rank);
}

std::string layout_name(const Layout& l) {
  return "dp " + std::to_string(l.dp) + " x pp " + std::to_string(l.pp) + " x cp " + std::to_string(l.cp);
}

std::string rank_name(const Layout& l, int world_rank) {
  const GridCoordinates c = grid_coordinates(l, world_rank);
  return "rank " + std::to_string(world_rank) + " (dp " + std::to_string(c.dp_rank) + ", pp " +
         std::to_string(c.pp_rank) + ", cp " + std::to_string(c.cp_rank) + ")";
}

}  // namespace lct

#include "model/tensor_table.h"

#include <algorithm>
#include <stdexcept>

namespace lct {

void TensorTable::add(std::string name, std::vector<int64_t> shape, TensorInit init, int layer,
                      bool weight_decay, bool joined) {
  TensorSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.init = init;
  s.layer = layer;
  s.weight_decay = weight_decay;
  s.numel = 1;
  for (int64_t d : s.shape) s.numel *= d;
  // every tensor 16-float (64-byte) aligned inside the arena for vector loads, except
  // the second and later of a joined run, which follow the one before directly
  if (!join_next_) total_ = (total_ + 15) / 16 * 16;
  s.offset = total_;
  total_ += s.numel;
  join_next_ = joined;
  specs_.push_back(std::move(s));
}

int64_t TensorTable::total() const { return (total_ + 15) / 16 * 16; }

const TensorSpec* TensorTable::find(const std::string& name) const {
  for (const TensorSpec& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

const TensorSpec& TensorTable::get(const std::string& name) const {
  const TensorSpec* s = find(name);
  if (!s) throw std::out_of_range("no tensor named '" + name + "'");
  return *s;
}

std::string hf_name_to_path(const std::string& name) {
  std::string p = name;
  std::replace(p.begin(), p.end(), '.', '/');
  return p;
}

ArenaRange layer_range(const TensorTable& table, int l0, int l1) {
  ArenaRange r{table.total(), 0};
  for (const TensorSpec& s : table.specs())
    if (s.layer >= l0 && s.layer < l1) {
      r.begin = std::min(r.begin, s.offset);
      r.end = std::max(r.end, s.offset + s.numel);
    }
  if (r.end == 0) r.begin = 0;
  return r;
}

}  // namespace lct

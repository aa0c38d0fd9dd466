#include "model/activations.h"

#include <algorithm>
#include <stdexcept>

namespace lct {

int ActivationTable::add(std::string name, int64_t width, Precision storage) {
  if (width <= 0) throw std::invalid_argument("activation '" + name + "' needs a positive width");
  specs_.push_back({std::move(name), width, per_token_, storage});
  per_token_ += specs_.back().span();
  return int(specs_.size()) - 1;
}

int ActivationTable::id(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].name == name) return int(i);
  throw std::out_of_range("no activation named '" + name + "'");
}

void ActivationSlot::reset(const ActivationTable& table, int64_t T) {
  const size_t need = size_t(table.floats_per_token() * T);
  if (data_.size() < need) {
    // grow-only; the contents are forgotten anyway, so the old buffer goes first (no
    // old + new peak), and 1/64 headroom absorbs the few tokens by which context-parallel
    // shards vary from step to step
    std::vector<float>().swap(data_);
    data_.resize(need + size_t(table.floats_per_token()) * size_t(std::max<int64_t>(16, T / 64)));
  }
  offsets_.resize(table.specs().size());
  bf16_.resize(table.specs().size());
  for (size_t i = 0; i < offsets_.size(); ++i) {
    offsets_[i] = table.specs()[i].offset;
    bf16_[i] = table.specs()[i].storage == Precision::bf16;
  }
  tokens_ = T;
  batch = nullptr;
  round = -1;
  backward_round = -1;
}

ActivationSlot& SlotPool::acquire() {
  ActivationSlot* s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    slots_.push_back(std::make_unique<ActivationSlot>());
    s = slots_.back().get();
  }
  peak_in_use_ = std::max(peak_in_use_, ++in_use_);
  return *s;
}

void SlotPool::release(ActivationSlot& slot) {
  slot.batch = nullptr;
  slot.round = -1;
  slot.backward_round = -1;
  free_.push_back(&slot);
  --in_use_;
}

int64_t SlotPool::peak_bytes() const {
  int64_t largest = 0;
  for (const auto& s : slots_) largest = std::max(largest, s->capacity_bytes());
  return largest * peak_in_use_;
}

}  // namespace lct

// One table of named tensors describes the model's parameters. The same table drives
// initialisation, checkpoint I/O (HDF5 paths), the gradient norm, the optimizer, the
// gradient reduction buckets and the pipeline stages' owned ranges: parameters,
// gradients and optimizer moments are each one contiguous arena with identical offsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lct {

enum class TensorInit {
  normal,         // N(0, std)
  normal_output,  // N(0, std / sqrt(2 * layers)): projections writing into the residual
  ones,           // norm weights
};

struct TensorSpec {
  std::string name;            // Hugging Face Llama name, e.g. model.layers.0.mlp.up_proj.weight
  std::vector<int64_t> shape;  // [out, in] for linear weights
  TensorInit init = TensorInit::normal;
  int layer = -1;              // decoder layer index, -1 for embedding / final norm / head
  bool weight_decay = true;    // AdamW decays matrices, not norm weights
  int64_t offset = 0;          // element offset into the arena
  int64_t numel = 0;
};

class TensorTable {
 public:
  // Each tensor starts 16-float (64-byte) aligned, unless the one before was added with
  // `joined`: then it follows that one's last element directly, so matrices that share
  // an input form one matrix (Q, K and V; gate and up) that one product computes with.
  // The arena layout is invisible outside the process: checkpoints store tensors by name.
  void add(std::string name, std::vector<int64_t> shape, TensorInit init, int layer,
           bool weight_decay, bool joined = false);
  const std::vector<TensorSpec>& specs() const { return specs_; }
  const TensorSpec& get(const std::string& name) const;  // throws if absent
  const TensorSpec* find(const std::string& name) const;
  int64_t total() const;  // the arena's floats

 private:
  std::vector<TensorSpec> specs_;
  int64_t total_ = 0;
  bool join_next_ = false;
};

// "model.layers.0.mlp.up_proj.weight" -> "model/layers/0/mlp/up_proj/weight"
std::string hf_name_to_path(const std::string& name);

// Contiguous [begin, end) element range of the table holding layers [l0, l1) (the
// tensors of a pipeline stage are contiguous because the table is in layer order).
struct ArenaRange {
  int64_t begin = 0, end = 0;
};
ArenaRange layer_range(const TensorTable& table, int l0, int l1);

}  // namespace lct

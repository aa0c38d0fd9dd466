// The HDF5 tensor layout shared by parameter files, checkpoints and gradient dumps:
//   /model                 group; attributes with Hugging Face LlamaConfig names plus
//                          attention_kernel
//   /params/<hf path>      one float32 dataset per parameter at its global shape, e.g.
//                          /params/model/layers/0/self_attn/q_proj/weight  [out, in]
//   /grads/<hf path>       same layout, in gradient files written by `lct eval`
#pragma once

#include <string>

#include "model/llama.h"
#include "src/io/h5io.h"

namespace lct {

void write_model_attrs(H5File& file, const LlamaConfig& config);
// Reads /model attributes; throws naming the file and the missing/invalid attribute.
LlamaConfig read_model_attrs(const H5File& file);

// root is "/params" or "/grads"; one dataset per tensor of the table.
void write_tensors(H5File& file, const std::string& root, const TensorTable& table,
                   const float* arena);
// Checks every tensor is present with the table's shape; throws naming the tensor.
// Every tensor of `table` is under root with its shape and dtype float32 (nothing read):
// throws std::runtime_error naming the first that is not.
void check_tensors(const H5File& file, const std::string& root, const TensorTable& table);
void read_tensors(const H5File& file, const std::string& root, const TensorTable& table,
                  float* arena);
// A NaN or inf weight makes every figure computed from it meaningless (a NaN loss, NaN
// gradients, garbage tokens), so every reader of a model's weights refuses one (eval,
// generate, export, train.init_from, resume): throws std::runtime_error naming `path`,
// the first such tensor and its element, as training refuses a non-finite gradient.
void refuse_non_finite_params(const TensorTable& table, const float* arena, const std::string& path);
// The first tensor of `table` holding a NaN or inf in `arena` and the element's index
// within it, or null: the scan behind refuse_non_finite_params, for other arenas of the
// same layout (eval's gradients).
const TensorSpec* first_non_finite(const TensorTable& table, const float* arena, int64_t& element);

}  // namespace lct

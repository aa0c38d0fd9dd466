#include "src/io/model_file.h"

#include "src/io/params_io.h"

namespace lct {

ModelFile::ModelFile(const std::string& path) : path_(path), hf_(is_hf_model_path(path)) {
  if (hf_) {
    files_ = find_hf_model_files(path);
    config_ = read_hf_config(files_.config);
  } else {
    h5_.emplace(H5File::open_read(path));
    config_ = read_model_attrs(*h5_);
  }
}

std::string ModelFile::run_config() const {
  return h5_ && h5_->exists("/config") ? h5_->read_string("/config") : "";
}

void ModelFile::check_params(const LlamaConfig& config, const TensorTable& table) {
  if (hf_) check_hf_params(files_, config, table);
  else check_tensors(*h5_, "/params", table);
}

void ModelFile::read_params(const LlamaConfig& config, const TensorTable& table, float* arena) {
  if (hf_) read_hf_params(files_, config, table, arena);
  else read_tensors(*h5_, "/params", table, arena);
}

}  // namespace lct

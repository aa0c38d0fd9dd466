#include "src/io/model_file.h"

#include <stdexcept>

#include "src/io/checkpoint.h"
#include "src/io/params_io.h"

namespace lct {

ModelFile::ModelFile(const std::string& path) : path_(path), hf_(is_hf_model_path(path)) {
  if (hf_) {
    files_ = find_hf_model_files(path);
    config_ = read_hf_config(files_.config);
  } else {
    h5_.emplace(H5File::open_read(path));
    // a file of a later lct is refused here as resume and inspect refuse it: its tensors
    // may mean something this lct does not know (a parameter file has no version)
    if (const auto version = h5_->attr_int("/", "format_version"); version && *version != kCheckpointFormatVersion)
      throw std::runtime_error(path + ": checkpoint format_version " + std::to_string(*version) +
                               " is not supported (this lct reads " + std::to_string(kCheckpointFormatVersion) + ")");
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
  if (hf_) {
    read_hf_params(files_, config, table, arena);
  } else {
    read_tensors(*h5_, "/params", table, arena);
    refuse_non_finite_params(table, arena, path_);  // (read_hf_params refuses them itself)
  }
}

}  // namespace lct

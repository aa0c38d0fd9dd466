// Fuzz-style tests of every loader lct feeds user files through (issue 14): thousands of
// mutated configs, batch files and checkpoints, each ending in success or one clean
// error (the exception types lct reports as one line), never a crash, a hang, another
// exception (std::bad_alloc, std::length_error, ...) or a write. Files are mutated and
// opened in memory (H5File::open_image), so nothing touches the disk.
//
// Mutations: random truncation, 1-8 bit flips, byte runs overwritten, and structural
// ones made through HDF5 itself (attributes set to extreme integers, floats or strings,
// datasets with other shapes, dtypes or values, datasets removed). Deterministic
// (fixed seeds); the counts are the issue's >= 10,000 in total.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/optimizer.h"
#include "src/io/checkpoint.h"
#include "src/config/config.h"
#include "src/io/batch_file.h"
#include "src/cli/inspect.h"
#include "src/io/h5io.h"
#include "src/io/params_io.h"
#include "src/train/run_objects.h"
#include "src/train/run_plan.h"
#include "tests/test_util.h"

namespace lct::fuzz_test {  // the file's own namespace: a unity build compiles test files together
namespace {

using Bytes = std::vector<char>;

// Runs `load`; true on success, false on a clean error; fails the test on anything else.
template <typename Load>
bool loads_cleanly(const Load& load, const std::string& what) {
  try {
    load();
    return true;
  } catch (const ConfigError&) {
  } catch (const std::invalid_argument&) {
  } catch (const std::runtime_error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unclean error " << typeid(e).name() << ": " << e.what();
  }
  return false;
}

// Byte-level mutations of an image: truncation, bit flips, an overwritten run.
Bytes mutate_bytes(const Bytes& in, std::mt19937_64& rng) {
  Bytes b = in;
  std::uniform_int_distribution<size_t> pos(0, b.size() - 1);
  switch (rng() % 3) {
    case 0:
      b.resize(pos(rng));
      break;
    case 1:
      for (int i = 0, n = 1 + int(rng() % 8); i < n; ++i) b[pos(rng)] ^= char(1 << (rng() % 8));
      break;
    default: {
      const size_t at = pos(rng), len = 1 + rng() % 16;
      for (size_t i = at; i < std::min(b.size(), at + len); ++i) b[i] = char(rng());
    }
  }
  return b;
}

// A whole file's bytes.
Bytes file_bytes(const std::string& path) {  // one read, not a character at a time
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  Bytes b(size_t(std::max<std::streamoff>(in.tellg(), 0)));
  in.seekg(0);
  in.read(b.data(), std::streamsize(b.size()));
  b.resize(size_t(in.gcount()));
  return b;
}

int64_t extreme_int(std::mt19937_64& rng) {
  const int64_t picks[] = {0, -1, 1, 2, 3, 7, 255, 256, 65536, int64_t(1) << 31, (int64_t(1) << 31) - 1,
                           (int64_t(1) << 32) + 1, int64_t(1) << 40, int64_t(1e15),
                           std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  return picks[rng() % (sizeof(picks) / sizeof(picks[0]))];
}

// ---- configs ----------------------------------------------------------------
std::string default_toml() {
  std::ifstream in(std::string(LCT_SOURCE_DIR) + "/configs/default.toml");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Fuzz, ConfigsLoadOrFailCleanly) {
  const std::string base = default_toml();
  ASSERT_FALSE(base.empty());
  std::mt19937_64 rng(14);
  const std::vector<std::string> values = {"0", "-1", "4294967297", "9223372036854775807", "99999999999999999999",
                                           "1e9", "1.5", "nan", "inf", "\"text\"", "true", "[1, 2]", "[]", "\"\"",
                                           "{ a = 1 }", "2048", "-9223372036854775808"};
  int ok = 0, refused = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    std::string text = base;
    if (i % 2 == 0) {
      // a real key set to an extreme or wrong-typed value
      const auto& keys = config_keys();
      const std::string key = keys[rng() % keys.size()].name;
      const std::string section = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
      text += "\n[" + section + "]\n" + name + " = " + values[rng() % values.size()] + "\n";
    } else {
      Bytes b(text.begin(), text.end());
      b = mutate_bytes(b, rng);
      text.assign(b.begin(), b.end());
    }
    const bool loaded = loads_cleanly(
        [&] {
          Config c;
          apply_toml_text(c, text, "fuzz.toml");
          validate_config(c);
          (void)make_run_plan(c, 1);
        },
        "config mutation " + std::to_string(i));
    (loaded ? ok : refused) += 1;
  }
  EXPECT_EQ(ok + refused, n);
  EXPECT_GT(refused, n / 4);  // the mutations do reach the checks
  std::printf("configs: %d mutations, %d loaded, %d refused cleanly\n", n, ok, refused);
}

// ---- batch files -------------------------------------------------------------
Bytes batch_image(const std::vector<int32_t>& tokens, const std::vector<int32_t>& cu, const std::vector<int32_t>* mask) {
  H5File f = H5File::create_in_memory("batch.h5");
  f.write_i32("/tokens", {int64_t(tokens.size())}, tokens.data());
  f.write_i32("/cu_seqlens", {int64_t(cu.size())}, cu.data());
  if (mask) f.write_i32("/answer_mask", {int64_t(mask->size())}, mask->data());
  return f.image();
}

TEST(Fuzz, BatchFilesLoadOrFailCleanly) {
  std::mt19937_64 rng(7);
  std::vector<int32_t> tokens(64), cu = {0, 10, 30, 64}, mask(64, 0);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % 256);
  mask[5] = mask[20] = 1;
  const Bytes base = batch_image(tokens, cu, &mask);
  int ok = 0, refused = 0;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    Bytes image;
    if (i % 2 == 0) {
      image = mutate_bytes(base, rng);
    } else {
      // structurally valid HDF5 with wrong contents
      std::vector<int32_t> t = tokens, c = cu, m = mask;
      switch (rng() % 6) {
        case 0: t[rng() % t.size()] = int32_t(extreme_int(rng)); break;
        case 1: c[rng() % c.size()] = int32_t(extreme_int(rng)); break;
        case 2: c.resize(rng() % 5); break;
        case 3: t.resize(rng() % 80); break;
        case 4: m[rng() % m.size()] = int32_t(extreme_int(rng)); break;
        default: m.resize(rng() % 70); break;
      }
      H5File f = H5File::create_in_memory("batch.h5");
      if (rng() % 8 == 0) {  // a float dataset where int32 is documented
        std::vector<float> tf(t.begin(), t.end());
        f.write_f32("/tokens", {int64_t(tf.size())}, tf.data());
      } else if (!t.empty() || rng() % 2) {
        f.write_i32("/tokens", {int64_t(t.size())}, t.data());
      }
      f.write_i32("/cu_seqlens", {int64_t(c.size())}, c.data());
      if (rng() % 2) f.write_i32("/answer_mask", {int64_t(m.size())}, m.data());
      image = f.image();
    }
    const bool loaded = loads_cleanly(
        [&] {
          const H5File f = H5File::open_image(image, "fuzz_batch.h5");
          const PackedBatch b = read_batch(f, 256);
          ASSERT_EQ(b.cu_seqlens.back(), int32_t(b.tokens.size()));
        },
        "batch mutation " + std::to_string(i));
    (loaded ? ok : refused) += 1;
  }
  EXPECT_GT(refused, n / 4);
  std::printf("batch files: %d mutations, %d loaded, %d refused cleanly\n", n, ok, refused);
}

// ---- checkpoints -------------------------------------------------------------
LlamaConfig tiny_model() { return test::llama_shape(32, 16, 24, 1, 2, 1); }

TEST(Fuzz, CheckpointsVerifyOrFailCleanly) {
  Config config;
  config.model = tiny_model();
  const LlamaModel model(config.model);
  OptimizerConfig oc;
  Optimizer optimizer(oc, model.table());
  TrainerState state;
  state.step = 2;
  std::vector<StepRecord> history(2);
  // the checkpoint as lct writes it, captured in memory
  Bytes base;
  {
    const std::string path = testing::TempDir() + "fuzz_base.h5";
    write_checkpoint(path, config_to_toml(config), model, optimizer, state, history);
    base = file_bytes(path);
    std::remove(path.c_str());
  }
  ASSERT_GT(base.size(), 1000u);
  const char* int_attrs[][2] = {{"/trainer", "step"},          {"/trainer", "next_sequence"},
                                {"/model", "vocab_size"},      {"/model", "hidden_size"},
                                {"/model", "num_hidden_layers"}, {"/model", "num_attention_heads"},
                                {"/model", "num_key_value_heads"}, {"/model", "intermediate_size"},
                                {"/", "format_version"},       {"/optim", "step_count"}};
  std::mt19937_64 rng(3);
  int ok = 0, refused = 0;
  const int n = 3200;
  for (int i = 0; i < n; ++i) {
    Bytes image;
    if (i % 2 == 0) {
      image = mutate_bytes(base, rng);
    } else {
      // valid HDF5, wrong contents: an attribute, a tensor's shape, a dataset gone
      const std::string path = testing::TempDir() + "fuzz_mutant.h5";
      {
        std::ofstream out(path, std::ios::binary);
        out.write(base.data(), std::streamsize(base.size()));
      }
      {
        H5File w = H5File::open_rw(path);
        const int kind = int(rng() % 4);
        if (kind == 0) {
          const auto& a = int_attrs[rng() % (sizeof(int_attrs) / sizeof(int_attrs[0]))];
          w.set_attr(a[0], a[1], extreme_int(rng));
        } else if (kind == 1) {
          w.set_attr("/model", "rope_theta", rng() % 2 ? -1.0 : std::numeric_limits<double>::infinity());
        } else if (kind == 2) {
          const std::string ds = "/params/model/norm/weight";
          w.remove(ds);
          std::vector<float> v(size_t(1 + rng() % 40), 1.0f);
          w.write_f32(ds, {int64_t(v.size())}, v.data());
        } else {
          w.remove(rng() % 2 ? "/metrics/loss" : "/params/model/embed_tokens/weight");
        }
      }
      image = file_bytes(path);
      std::remove(path.c_str());
    }
    const bool loaded = loads_cleanly(
        [&] {
          const H5File f = H5File::open_image(image, "fuzz_ckpt.h5");
          (void)verify_checkpoint(f);
        },
        "checkpoint mutation " + std::to_string(i));
    (loaded ? ok : refused) += 1;
  }
  EXPECT_GT(refused, n / 4);
  std::printf("checkpoints: %d mutations, %d verified, %d refused cleanly\n", n, ok, refused);
}

// ---- attribute shapes, types and links (reliability round 3) -----------------------
// Every attribute and dataset lct reads, rewritten through HDF5 itself with another
// dataspace (arrays of 2 to 3,000 values, empty), another type (integers, floats, fixed
// and variable strings, compound) or replaced by a soft, external or dangling link or a
// group. Readers must refuse each cleanly; before the fix an array read as one value
// overflowed the stack or heap and external links opened other files.
struct Mutator {
  std::mt19937_64& rng;

  hid_t random_type(size_t& size) {
    switch (rng() % 5) {
      case 0: size = 8; return H5Tcopy(H5T_NATIVE_INT64);
      case 1: size = 8; return H5Tcopy(H5T_NATIVE_DOUBLE);
      case 2: {
        size = 1 + rng() % 300;  // fixed-length string
        const hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, size);
        return t;
      }
      case 3: {
        size = sizeof(char*);
        const hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        return t;
      }
      default: {
        size = 8;
        const hid_t t = H5Tcreate(H5T_COMPOUND, 8);
        H5Tinsert(t, "a", 0, H5T_NATIVE_INT32);
        H5Tinsert(t, "b", 4, H5T_NATIVE_INT32);
        return t;
      }
    }
  }
  hid_t random_space(hsize_t& count) {
    const int pick = int(rng() % 4);
    if (pick == 0) {
      count = 1;
      return H5Screate(H5S_SCALAR);
    }
    if (pick == 1) {
      count = 0;
      return H5Screate(H5S_NULL);
    }
    hsize_t dims[2] = {2 + rng() % 3000, 1 + rng() % 3};
    const int rank = pick == 2 ? 1 : 2;
    if (rank == 2) dims[0] = 2 + rng() % 300;
    count = rank == 1 ? dims[0] : dims[0] * dims[1];
    return H5Screate_simple(rank, dims, nullptr);
  }
  // a buffer of `count` values of a type of `size` bytes (variable strings point at text)
  std::vector<char> values(hid_t type, size_t size, hsize_t count, std::vector<std::string>& texts) {
    std::vector<char> buf(size_t(std::max<hsize_t>(count, 1)) * size);
    if (H5Tis_variable_str(type) > 0) {
      texts.assign(size_t(std::max<hsize_t>(count, 1)), std::string(size_t(rng() % 40), 'x'));
      for (size_t i = 0; i < texts.size(); ++i) {
        const char* p = texts[i].c_str();
        std::memcpy(buf.data() + i * size, &p, sizeof p);
      }
    } else {
      for (char& c : buf) c = char(rng() % 128);
    }
    return buf;
  }
  void attribute(hid_t file, const char* object, const char* name) {
    const hid_t o = H5Oopen(file, object, H5P_DEFAULT);
    if (o < 0) return;
    if (H5Aexists(o, name) > 0) H5Adelete(o, name);
    size_t size = 0;
    hsize_t count = 0;
    const hid_t t = random_type(size), sp = random_space(count);
    std::vector<std::string> texts;
    const std::vector<char> buf = values(t, size, count, texts);
    const hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
      if (count > 0) H5Awrite(a, t, buf.data());
      H5Aclose(a);
    }
    H5Sclose(sp), H5Tclose(t), H5Oclose(o);
  }
  void dataset(hid_t file, const char* path) {
    if (H5Lexists(file, path, H5P_DEFAULT) > 0) H5Ldelete(file, path, H5P_DEFAULT);
    switch (rng() % 6) {
      case 0: H5Lcreate_soft("/", file, path, H5P_DEFAULT, H5P_DEFAULT); return;
      case 1: H5Lcreate_soft("/nowhere", file, path, H5P_DEFAULT, H5P_DEFAULT); return;
      case 2: H5Lcreate_external("/dev/zero", "/x", file, path, H5P_DEFAULT, H5P_DEFAULT); return;
      case 3: H5Lcreate_external("no_such_file.h5", "/tokens", file, path, H5P_DEFAULT, H5P_DEFAULT); return;
      case 4: {
        const hid_t g = H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0) H5Gclose(g);
        return;
      }
      default: {
        size_t size = 0;
        hsize_t count = 0;
        const hid_t t = random_type(size), sp = random_space(count);
        std::vector<std::string> texts;
        const std::vector<char> buf = values(t, size, count, texts);
        const hid_t d = H5Dcreate2(file, path, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (d >= 0) {
          if (count > 0) H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
          H5Dclose(d);
        }
        H5Sclose(sp), H5Tclose(t);
      }
    }
  }
};

// Runs inspect_file with stdout sent to /dev/null (it prints what it reads).
void inspect_quietly(const std::string& path) {
  std::fflush(stdout);
  const int saved = ::dup(1), null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 1);
  ::close(null);
  try {
    inspect_file(path, true);
  } catch (...) {
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
    throw;
  }
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
}

TEST(Fuzz, AttributeShapesTypesAndLinksFailCleanly) {
  Config config;
  config.model = tiny_model();
  config.model.attention_mask.kind = MaskKind::sliding_window;
  const LlamaModel model(config.model);
  OptimizerConfig oc;
  Optimizer optimizer(oc, model.table());
  TrainerState state;
  state.step = 2, state.next_sequence = 2, state.tokens_seen = 128, state.run_id = "0123456789abcdef";
  std::vector<StepRecord> history(2);
  const std::string base = testing::TempDir() + "fuzz_attrs_base.h5";
  write_checkpoint(base, config_to_toml(config), model, optimizer, state, history);
  const Bytes checkpoint = file_bytes(base);
  std::remove(base.c_str());
  std::vector<int32_t> tokens(64), cu = {0, 10, 30, 64}, mask(64, 0);
  const Bytes batch = batch_image(tokens, cu, &mask);

  const char* attrs[][2] = {
      {"/", "format"}, {"/", "format_version"}, {"/", "step"}, {"/trainer", "step"},
      {"/trainer", "tokens_seen"}, {"/trainer", "next_sequence"}, {"/trainer", "seed"},
      {"/trainer", "run_id"}, {"/optim", "kind"}, {"/optim", "step_count"}, {"/model", "vocab_size"},
      {"/model", "hidden_size"}, {"/model", "intermediate_size"}, {"/model", "num_hidden_layers"},
      {"/model", "num_attention_heads"}, {"/model", "num_key_value_heads"}, {"/model", "rope_theta"},
      {"/model", "rms_norm_eps"}, {"/model", "tie_word_embeddings"}, {"/model", "attention_kernel"},
      {"/model", "attention_mask"}, {"/model", "attention_window"}, {"/model", "head_dim"},
      {"/model", "rope_scaling"}, {"/params/model/norm/weight", "checksum"}};
  const char* datasets[] = {"/config", "/model", "/trainer", "/optim", "/params/model/norm/weight",
                            "/params/model/embed_tokens/weight", "/metrics/loss", "/metrics/step"};
  const char* batch_datasets[] = {"/tokens", "/cu_seqlens", "/answer_mask"};
  std::mt19937_64 rng(11);
  Mutator mutate{rng};
  int ok = 0, refused = 0;
  const int n = 1600;
  const std::string path = testing::TempDir() + "fuzz_attrs.h5";
  for (int i = 0; i < n; ++i) {
    const bool is_batch = i % 4 == 3;
    {
      const Bytes& b = is_batch ? batch : checkpoint;
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(b.data(), std::streamsize(b.size()));
    }
    {
      H5File w = H5File::open_rw(path);  // unseals: the file is changed on purpose
      for (int k = 0, m = 1 + int(rng() % 3); k < m; ++k) {
        if (is_batch) {
          mutate.dataset(w.id(), batch_datasets[rng() % 3]);
        } else if (rng() % 3) {
          const auto& a = attrs[rng() % (sizeof(attrs) / sizeof(attrs[0]))];
          mutate.attribute(w.id(), a[0], a[1]);
        } else {
          mutate.dataset(w.id(), datasets[rng() % (sizeof(datasets) / sizeof(datasets[0]))]);
        }
      }
    }
    const std::string what = std::string(is_batch ? "batch" : "checkpoint") + " mutation " + std::to_string(i);
    const bool loaded = loads_cleanly(
        [&] {
          const H5File f = H5File::open_read(path);
          if (is_batch) (void)read_batch(f, 256);
          else (void)verify_checkpoint(f);
        },
        what);
    if (i % 8 == 0) loads_cleanly([&] { inspect_quietly(path); }, what + " (inspect)");
    (loaded ? ok : refused) += 1;
  }
  std::remove(path.c_str());
  EXPECT_GT(refused, n / 2);
  std::printf("attribute shapes, types and links: %d mutations, %d loaded, %d refused cleanly\n", n, ok, refused);
}

}  // namespace
}  // namespace lct::fuzz_test

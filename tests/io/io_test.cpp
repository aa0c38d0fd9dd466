// HDF5 parameter layout, batch files and `lct eval`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/cli/eval.h"
#include "src/io/batch_file.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"
#include "src/io/params_io.h"
#include "tests/test_util.h"

namespace lct::io_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using test::error_of;
namespace fs = std::filesystem;

fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / ("lct_io_" + std::to_string(::getpid()) + "_" + name);
}

LlamaConfig small() {
  return test::llama_shape(13, 16, 20, 2, 4, 2);
}

void write_params(const std::string& path, LlamaModel& m) {
  write_h5_atomically(path, [&](H5File& f) {
    write_model_attrs(f, m.config());
    write_tensors(f, "/params", m.table(), m.params.data());
  });
}

void write_batch(const std::string& path, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& cu) {
  H5File f = H5File::create(path);
  f.write_i32("/tokens", {int64_t(tokens.size())}, tokens.data());
  f.write_i32("/cu_seqlens", {int64_t(cu.size())}, cu.data());
}

TEST(ParamsIo, SaveLoadSaveIsIdentical) {
  LlamaModel m(small());
  init_llama_params(m.table(), m.config(), 3, m.params.data());
  const std::string a = temp("a.h5").string();
  write_params(a, m);
  LlamaModel back = load_model(a);
  EXPECT_EQ(back.params, m.params);
  EXPECT_EQ(back.config().num_key_value_heads, 2);
  for (const auto& e : fs::directory_iterator(fs::path(a).parent_path()))
    EXPECT_EQ(e.path().filename().string().find(fs::path(a).filename().string() + ".lct-"), std::string::npos)
        << "temporary left: " << e.path();
  H5File f = H5File::open_read(a);
  EXPECT_EQ(f.shape("/params/model/layers/1/self_attn/q_proj/weight"), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(f.shape("/params/model/layers/1/self_attn/k_proj/weight"), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(*f.attr_string("/model", "attention_kernel"), "causal");
  EXPECT_EQ(*f.attr_int("/model", "num_hidden_layers"), 2);
  fs::remove(a);
}

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Reliability round 3, cause 1: the atomic writers once wrote through "<output>.tmp"
// (create + truncate, following symlinks), then renamed it away: a user's file of that
// name was destroyed, a symlink of that name written through.
TEST(AtomicFile, TemporariesNeverTouchFilesLctDidNotCreate) {
  const fs::path dir = temp("atomic");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path h5 = dir / "out.h5", text = dir / "out.txt", target = dir / "elsewhere.txt";
  std::ofstream(dir / "out.h5.tmp") << "a user's file";
  std::ofstream(target) << "the symlink's target";
  fs::create_symlink(target, dir / "out.txt.tmp");
  LlamaModel m(small());
  write_params(h5.string(), m);
  write_text_atomically(text.string(), "written\n");
  write_text_atomically(text.string(), "again\n");  // replaces its own output
  EXPECT_EQ(text_of(dir / "out.h5.tmp"), "a user's file");
  EXPECT_EQ(text_of(target), "the symlink's target");
  EXPECT_TRUE(fs::is_symlink(dir / "out.txt.tmp"));
  EXPECT_EQ(text_of(text), "again\n");
  EXPECT_EQ(load_model(h5.string()).params, m.params);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 5);  // the two outputs, the user's file, the symlink, its target: no temporary
  // a failed write leaves nothing behind and the old output as it was
  EXPECT_THROW(write_h5_atomically(h5.string(), [](H5File&) { throw std::runtime_error("fill failed"); }),
               std::runtime_error);
  EXPECT_EQ(load_model(h5.string()).params, m.params);
  entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 5);
  EXPECT_EQ(temporary_target("out.h5.lct-a1B2c3"), "out.h5");
  EXPECT_EQ(temporary_target("out.h5.tmp"), "");
  EXPECT_EQ(temporary_target(".lct-abcdef"), "");
  fs::remove_all(dir);
}

TEST(AtomicFile, UnwritableOutputsAreRefusedBeforeTheWork) {
  const fs::path dir = temp("unwritable");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  EXPECT_NE(error_of([&] { require_writable_output(dir.string(), "trace.path"); }).find("trace.path '" + dir.string() + "' is a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { require_writable_output("/dev/null", "trace.path"); }).find("is a character device"), std::string::npos);
  EXPECT_NE(error_of([&] { require_writable_output((dir / "file" / "t.json").string(), "trace.path", true); }).find("trace.path: cannot create the folder"), std::string::npos);
  EXPECT_NE(error_of([&] { require_writable_output((dir / "new" / "g.h5").string(), "--grads-out"); }).find("--grads-out: the folder"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "new"));
  require_writable_output((dir / "new" / "t.json").string(), "trace.path", true);  // makes the folder
  EXPECT_TRUE(fs::is_directory(dir / "new"));
  EXPECT_TRUE(fs::is_empty(dir / "new"));
  fs::remove_all(dir);
}

TEST(ParamsIo, MissingTensorAndWrongShapeAreNamed) {
  LlamaModel m(small());
  const std::string p = temp("bad.h5").string();
  write_h5_atomically(p, [&](H5File& f) {
    write_model_attrs(f, m.config());
    write_tensors(f, "/params", m.table(), m.params.data());
    const float x[3] = {1, 2, 3};
    f.write_f32("/other", {3}, x);
  });
  LlamaConfig bigger = small();
  bigger.intermediate_size = 24;
  LlamaModel wrong(bigger);
  EXPECT_NE(error_of([&] { read_tensors(H5File::open_read(p), "/params", wrong.table(), wrong.params.data()); })
                .find("model/layers/0/mlp/gate_proj/weight has shape [20, 16], expected [24, 16]"),
            std::string::npos);
  LlamaConfig tied_not = small();
  tied_not.tie_word_embeddings = false;
  LlamaModel untied(tied_not);
  const std::string q = temp("tied.h5").string();
  LlamaConfig tied = small();
  tied.tie_word_embeddings = true;
  LlamaModel t(tied);
  write_params(q, t);
  EXPECT_NE(error_of([&] { read_tensors(H5File::open_read(q), "/params", untied.table(), untied.params.data()); })
                .find("missing tensor /params/lm_head/weight"),
            std::string::npos);
  EXPECT_NE(error_of([&] { H5File::open_read(temp("absent.h5").string()); }).find("no such file"),
            std::string::npos);
  fs::remove(p);
  fs::remove(q);
}

TEST(Eval, BatchFileErrorsAreOneLine) {
  const std::string p = temp("batch.h5").string();
  write_batch(p, {1, 2, 3, 4}, {0, 3, 3, 4});
  EXPECT_NE(error_of([&] { read_batch_file(p, 13); }).find("strictly increasing"), std::string::npos);
  write_batch(p, {1, 2, 3, 4}, {0, 3});
  EXPECT_NE(error_of([&] { read_batch_file(p, 13); }).find("ends at 3 but there are 4 tokens"),
            std::string::npos);
  write_batch(p, {1, 2, 30, 4}, {0, 4});
  EXPECT_NE(error_of([&] { read_batch_file(p, 13); }).find("tokens[2] = 30 is outside"), std::string::npos);
  {
    H5File f = H5File::create(p);
    const int32_t t[2] = {1, 2};
    f.write_i32("/tokens", {2}, t);
  }
  EXPECT_NE(error_of([&] { read_batch_file(p, 13); }).find("missing dataset cu_seqlens"), std::string::npos);
  fs::remove(p);
}

TEST(Eval, GradientsFileMatchesInMemoryGradients) {
  LlamaModel m(small());
  init_llama_params(m.table(), m.config(), 4, m.params.data());
  const std::string ck = temp("ck.h5").string(), b = temp("b.h5").string(), g = temp("g.h5").string();
  write_params(ck, m);
  write_batch(b, {1, 5, 7, 2, 9, 3, 3}, {0, 2, 7});
  EvalOptions options;
  options.grads_out = g;
  const EvalResult r = run_eval(ck, b, options);
  EXPECT_EQ(r.targets, 5);
  PackedBatch batch = read_batch_file(b, 13);
  m.zero_grads();
  const double loss = m.forward_backward(batch, 1.0f / 5, true).loss_sum / 5;
  EXPECT_NEAR(r.loss, loss, 1e-7);
  H5File f = H5File::open_read(g);
  EXPECT_NEAR(*f.attr_double("/", "loss"), loss, 1e-7);
  LlamaModel from_file(small());
  read_tensors(f, "/grads", from_file.table(), from_file.params.data());
  EXPECT_EQ(from_file.params, m.grads);
  fs::remove(ck);
  fs::remove(b);
  fs::remove(g);
}

}  // namespace
}  // namespace lct::io_test

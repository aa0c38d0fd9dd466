// Checkpoints: exact round trips, resume equals the uninterrupted run, and every kind
// of damage fails with a message naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "src/io/checkpoint.h"
#include "src/config/config.h"
#include "src/train/trainer.h"
#include "tests/test_util.h"

namespace lct::checkpoint_test {  // the file's own namespace: a unity build compiles test files together
namespace {
namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("lct_ckpt_test_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  Config small_config(const std::string& source = "synthetic") {
    Config c;
    c.model = test::llama_shape(256, 32, 48, 2, 4, 2);
    c.data.seq_len = 96;
    c.data.max_doc_len = 80;
    c.train.steps = 21;
    c.train.micro_batches = 2;
    c.train.warmup_steps = 3;  // warm-up, then cosine decay over the rest
    c.train.lr = 5e-3;
    c.checkpoint.dir = (dir / "ckpt").string();
    c.checkpoint.keep = 100;
    if (source == "text") {
      fs::create_directories(dir / "corpus");
      for (int i = 0; i < 5; ++i)
        std::ofstream(dir / "corpus" / ("doc" + std::to_string(i) + ".txt"))
            << std::string(size_t(20 + 37 * i), char('a' + i)) << " some text " << i;
      c.data.source = DataSource::text;
      c.data.path = (dir / "corpus").string();
    }
    return c;
  }

  std::string saved(Trainer& t) { return t.save_checkpoint(); }
  fs::path dir;
};

void expect_resume_equals_uninterrupted(const Config& c, int64_t stop_at) {
  Trainer full(make_run_plan(c, 1));
  for (int64_t s = 0; s < c.train.steps; ++s) full.train_step();

  Trainer first(make_run_plan(c, 1));
  for (int64_t s = 0; s < stop_at; ++s) first.train_step();
  const std::string path = first.save_checkpoint();

  Trainer resumed(make_run_plan(c, 1));
  resumed.resume_from(path);
  ASSERT_EQ(resumed.state().step, stop_at);
  while (resumed.state().step < c.train.steps) resumed.train_step();

  ASSERT_EQ(resumed.history().size(), full.history().size());
  for (size_t i = 0; i < full.history().size(); ++i) {
    EXPECT_EQ(resumed.history()[i].loss, full.history()[i].loss) << "step " << i + 1;
    EXPECT_EQ(resumed.history()[i].grad_norm, full.history()[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(resumed.history()[i].lr, full.history()[i].lr) << "step " << i + 1;
  }
  EXPECT_EQ(resumed.model().params, full.model().params);
  EXPECT_EQ(resumed.optimizer().exp_avg_sq(), full.optimizer().exp_avg_sq());
  EXPECT_EQ(resumed.state().tokens_seen, full.state().tokens_seen);
}

TEST_F(CheckpointTest, ResumeEqualsUninterruptedSynthetic) {
  expect_resume_equals_uninterrupted(small_config(), 7);
}

TEST_F(CheckpointTest, ResumeEqualsUninterruptedText) {
  expect_resume_equals_uninterrupted(small_config("text"), 11);
}

TEST_F(CheckpointTest, SaveLoadSaveGivesIdenticalTensors) {
  Config c = small_config();
  Trainer t(make_run_plan(c, 1));
  for (int s = 0; s < 3; ++s) t.train_step();
  const std::string a = t.save_checkpoint();
  Trainer u(make_run_plan(c, 1));
  u.resume_from(a);
  c.checkpoint.dir = (dir / "second").string();
  Trainer v(make_run_plan(c, 1));
  v.resume_from(a);
  const std::string b = v.save_checkpoint();
  H5File fa = H5File::open_read(a), fb = H5File::open_read(b);
  for (const std::string root : {"/params", "/optim/exp_avg", "/optim/exp_avg_sq"})
    for (const TensorSpec& s : t.model().table().specs()) {
      const std::string ds = root + "/" + hf_name_to_path(s.name);
      EXPECT_EQ(fa.read_f32(ds), fb.read_f32(ds)) << ds;
      EXPECT_EQ(*fa.attr_string(ds, "checksum"), *fb.attr_string(ds, "checksum"));
    }
  const CheckpointContents ha = read_checkpoint_header(fa), hb = read_checkpoint_header(fb);
  EXPECT_EQ(ha.state.step, 3);
  EXPECT_EQ(hb.state.next_sequence, 6);
  EXPECT_EQ(ha.history.size(), 3u);
  EXPECT_EQ(ha.history[2].loss, hb.history[2].loss);
  EXPECT_EQ(ha.optimizer_step, 3);
}

// Each kind of damage fails on load with a message containing `want`.
class DamagedCheckpoint : public CheckpointTest {
 protected:
  std::string good;
  Config config;
  void SetUp() override {
    CheckpointTest::SetUp();
    config = small_config();
    Trainer t(make_run_plan(config, 1));
    t.train_step();
    good = t.save_checkpoint();
  }
  std::string copy(const std::string& name) {
    const std::string p = (dir / name).string();
    fs::copy_file(good, p);
    return p;
  }
  void expect_load_error(const std::string& path, const std::string& want) {
    Trainer t(make_run_plan(config, 1));
    const std::vector<float> before = t.model().params;
    try {
      t.resume_from(path);
      ADD_FAILURE() << "loaded a damaged checkpoint, wanted: " << want;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);  // one line
    }
    EXPECT_EQ(t.model().params, before);  // nothing half-loaded
    EXPECT_EQ(t.state().step, 0);
  }
};

TEST_F(DamagedCheckpoint, TruncatedFile) {
  const std::string p = copy("truncated.h5");
  fs::resize_file(p, fs::file_size(p) / 2);
  // another length than the seal's: checked as an unsealed file, whose superblock HDF5
  // finds short of its end before it reads anything else
  expect_load_error(p, "not a readable HDF5 file");
}

TEST_F(DamagedCheckpoint, TruncatedUnsealedFile) {
  const std::string p = copy("truncated_unsealed.h5");
  H5File::open_rw(p).close();  // an ordinary HDF5 file from here on
  fs::resize_file(p, fs::file_size(p) / 2);
  expect_load_error(p, "not a readable HDF5 file");
}

TEST_F(DamagedCheckpoint, FlippedByteAnywhere) {
  // lct's files carry a checksum of the whole file: any flipped byte is caught before
  // HDF5 reads the file
  const std::string p = copy("flipped_any.h5");
  const auto size = fs::file_size(p);
  for (const auto at : {size_t(600), size_t(size / 2), size_t(size - 1)}) {
    std::fstream file(p, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(std::streamoff(at));
    char byte;
    file.read(&byte, 1);
    byte ^= 0x01;
    file.seekp(std::streamoff(at));
    file.write(&byte, 1);
    file.close();
    expect_load_error(p, "the file's checksum does not match (corrupt)");
    std::fstream undo(p, std::ios::in | std::ios::out | std::ios::binary);
    undo.seekp(std::streamoff(at));
    byte ^= 0x01;
    undo.write(&byte, 1);
  }
}

TEST_F(DamagedCheckpoint, FlippedByteInTensor) {
  const std::string p = copy("flipped.h5");
  H5File::open_rw(p).close();  // unsealed: the per-tensor checksum is what catches it
  haddr_t offset;
  {
    H5File f = H5File::open_read(p);
    const hid_t d = H5Dopen2(f.id(), "/params/model/layers/1/mlp/up_proj/weight", H5P_DEFAULT);
    offset = H5Dget_offset(d);
    H5Dclose(d);
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  std::fstream file(p, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(std::streamoff(offset + 101));
  char byte;
  file.read(&byte, 1);
  byte ^= 0x10;
  file.seekp(std::streamoff(offset + 101));
  file.write(&byte, 1);
  file.close();
  expect_load_error(p, "/params/model/layers/1/mlp/up_proj/weight is corrupt (checksum");
}

TEST_F(DamagedCheckpoint, MissingTensor) {
  const std::string p = copy("missing.h5");
  H5File::open_rw(p).remove("/optim/exp_avg/model/layers/0/self_attn/v_proj/weight");
  expect_load_error(p, "missing tensor /optim/exp_avg/model/layers/0/self_attn/v_proj/weight");
}

TEST_F(DamagedCheckpoint, WrongShape) {
  const std::string p = copy("shape.h5");
  {
    H5File f = H5File::open_rw(p);
    f.remove("/params/model/norm/weight");
    const std::vector<float> w(31, 1.0f);
    f.write_f32("/params/model/norm/weight", {31}, w.data());
  }
  expect_load_error(p, "tensor /params/model/norm/weight has shape [31], expected [32]");
}

TEST_F(DamagedCheckpoint, WrongDtype) {
  const std::string p = copy("dtype.h5");
  {
    H5File f = H5File::open_rw(p);
    f.remove("/params/model/norm/weight");
    const std::vector<double> w(32, 1.0);
    f.write_f64("/params/model/norm/weight", {32}, w.data());
  }
  expect_load_error(p, "has dtype float64, expected float32");
}

TEST_F(DamagedCheckpoint, WrongFormatVersion) {
  const std::string p = copy("version.h5");
  H5File::open_rw(p).set_attr("/", "format_version", int64_t(99));
  expect_load_error(p, "format_version 99 is not supported");
}

TEST_F(DamagedCheckpoint, NotACheckpoint) {
  const std::string p = (dir / "params_only.h5").string();
  {
    H5File f = H5File::create(p);
    f.set_attr("/", "format", std::string("something-else"));
  }
  expect_load_error(p, "not an lct checkpoint");
}

TEST_F(DamagedCheckpoint, ModelShapeMismatchNamesTheKey) {
  config.model.intermediate_size = 64;
  expect_load_error(good, "model.intermediate_size is 48 in the checkpoint but 64 in this run");
}

TEST_F(DamagedCheckpoint, LatestSkipsUnreadableFiles) {
  const std::string newer = (fs::path(config.checkpoint.dir) / "step_00000099.h5").string();
  std::ofstream(newer) << "garbage";
  EXPECT_EQ(latest_checkpoint(config.checkpoint.dir), good);
  EXPECT_EQ(latest_checkpoint((dir / "nothing").string()), "");
}

}  // namespace
}  // namespace lct::checkpoint_test

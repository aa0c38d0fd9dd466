// Hugging Face interop (src/io/safetensors.h, src/io/hf_model.h): safetensors written and
// read back exactly, every malformed header refused in one line (and a fuzz of the
// header that may only ever end in such a line), config.json read and refused, a model
// folder's tensors read back bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "compute/gemm.h"
#include "model/llama.h"
#include "src/io/hf_model.h"
#include "src/io/safetensors.h"
#include "src/util/json.h"
#include "tests/test_util.h"

namespace lct::hf_test {  // the file's own namespace: a unity build compiles test files together
namespace {
namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/lct_hf_test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file of `header` (its length prefixed) and `data_bytes` zero bytes of data.
std::string framed(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

// The one-line error opening `bytes` as a safetensors file gives ("" when it opens).
std::string refusal(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("x.safetensors");
  write_file(path, bytes);
  try {
    SafetensorsFile f(path);
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
    return what;
  }
  return "";
}

TEST(Safetensors, WrittenAndReadBackExactly) {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.5f, 3.14159274f, 1e-30f, -0.0f, 65504.0f};
  const std::vector<float> b = {0.1f, 0.2f};
  const std::vector<SafetensorsTensor> tensors = {{"a.weight", {2, 3}, a.data()}, {"b", {2}, b.data()}};
  write_file(dir.file("f32.safetensors"), safetensors_bytes(tensors, SafetensorsDtype::f32, {{"format", "pt"}}));
  SafetensorsFile f(dir.file("f32.safetensors"));
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[0].name, "a.weight");  // the header's order
  EXPECT_EQ(f.metadata().at("format"), "pt");
  std::vector<float> got(6);
  f.read_f32(*f.find("a.weight"), got.data());
  EXPECT_EQ(std::memcmp(got.data(), a.data(), 24), 0);
  // bf16: each value rounded to nearest even, read back as that float
  write_file(dir.file("bf16.safetensors"), safetensors_bytes(tensors, SafetensorsDtype::bf16, {}));
  SafetensorsFile g(dir.file("bf16.safetensors"));
  EXPECT_EQ(g.find("b")->dtype, SafetensorsDtype::bf16);
  EXPECT_EQ(g.find("b")->end - g.find("b")->begin, 4);
  g.read_f32(*g.find("a.weight"), got.data());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(got[i], round_to_bf16(a[i])) << i;
  // the data starts 8-byte aligned (the header padded with spaces)
  std::ifstream in(dir.file("bf16.safetensors"), std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, HalfPrecisionWidensExactly) {
  TempDir dir;
  // F16 bits: 1.0, -2.0, 65504 (largest), 2^-24 (smallest subnormal), 0.000060975552 (a
  // subnormal), -0, inf
  const std::vector<uint16_t> bits = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x8000, 0x7c00};
  const std::vector<float> want = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 1023 * 0x1p-24f, -0.0f,
                                   std::numeric_limits<float>::infinity()};
  std::string data(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  const std::string header = R"({"h":{"dtype":"F16","shape":[7],"data_offsets":[0,14]}})";
  std::string bytes = framed(header, 0) + data;
  write_file(dir.file("h.safetensors"), bytes);
  SafetensorsFile f(dir.file("h.safetensors"));
  std::vector<float> got(7);
  f.read_f32(f.entries()[0], got.data());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
  }
}

TEST(Safetensors, MalformedFilesAreOneLineRefusals) {
  TempDir dir;
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(refusal(dir, framed(ok, 8)), "");
  const auto expect = [&](const std::string& bytes, const std::string& part) {
    const std::string why = refusal(dir, bytes);
    EXPECT_NE(why.find(part), std::string::npos) << "wanted '" << part << "', got '" << why << "'";
  };
  expect("", "shorter than the 8-byte header length");
  expect(std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8) + "{}", "is beyond the file's");
  {
    std::string huge = framed("{}", 0);
    const uint64_t n = 100'000'001;
    for (int i = 0; i < 8; ++i) huge[size_t(i)] = char((n >> (8 * i)) & 0xff);
    expect(huge, "above the 100 MB limit");
  }
  expect(framed("[1, 2]", 0), "does not start with '{'");
  expect(framed("{\"t\": ", 0), "not valid JSON");
  expect(framed(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
         "'t' is given twice");
  expect(framed(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "past the data");
  expect(framed(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "takes 12 bytes, its data_offsets 8");
  expect(framed(R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", 8), "takes 4 bytes");
  expect(framed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
         "overlaps");
  expect(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole");
  expect(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "4 bytes after its last tensor");
  expect(framed(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8), "dtype I64");
  expect(framed(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "not a non-negative integer");
  expect(framed(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", 4),
         "too large");
  expect(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "end before they begin");
  expect(framed(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "no data_offsets");
  expect(framed(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4), "unknown field 'x'");
  expect(framed(R"({"__metadata__":{"k":1}})", 0), "__metadata__.k is not a string");
  expect(framed("{\"a\":" + std::string(10000, '[') + std::string(10000, ']') + "}", 0), "nests deeper");
  // a name from the file is printed escaped: a NUL in it does not cut the message
  expect(framed(R"({"a\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
         "the name 'a\\x00b' is given twice");
  // a NUL ends nlohmann's input: the header must be one JSON value, nothing after it
  expect(framed(ok + std::string(1, '\0') + "garbage", 8), "is a NUL");
  {  // a file that is shorter than its tensors say
    const std::string path = dir.file("short.safetensors");
    write_file(path, framed(ok, 8));
    SafetensorsFile f(path);
    fs::resize_file(path, fs::file_size(path) - 4);
    std::vector<float> out(2);
    EXPECT_THROW(f.read_f32(f.entries()[0], out.data()), std::runtime_error);
  }
}

// Random byte edits, insertions and deletions of a valid header: opening either succeeds
// (and every tensor then reads) or throws one runtime_error line; never a crash, a hang
// or another exception.
TEST(Safetensors, HeaderFuzzOnlyEverRefusesInOneLine) {
  TempDir dir;
  const std::vector<float> a(12, 0.5f), b(5, -1.0f);
  const std::string good =
      safetensors_bytes({{"model.a", {3, 4}, a.data()}, {"model.b", {5}, b.data()}}, SafetensorsDtype::f32,
                        {{"format", "pt"}});
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  std::mt19937_64 rng(12345);
  const std::string alphabet = std::string("{}[]\":,0123456789-eE.FBI68 \\uabcdefz") + char(0) + char(0xff);
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: bytes.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: bytes.erase(at, 1); break;
        default: bytes[at] = char(rng() & 0xff); break;
      }
    }
    const std::string path = dir.file("fuzz.safetensors");
    write_file(path, bytes);
    try {
      SafetensorsFile f(path);
      for (const SafetensorsEntry& e : f.entries()) {
        std::vector<float> out(size_t(e.numel()));
        f.read_f32(e, out.data());
      }
      ++opened;
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);  // most edits break it
  EXPECT_GT(opened, 0);      // some leave it valid (a space, a digit of padding)
}

// config.json under hostile edits (issue 54): each field set to another JSON type or an
// out-of-range value, deleted, an unknown field added, a NUL or garbage after the object,
// the text cut. read_hf_config either returns a config that validates, read with the
// fields' own types, or throws one runtime_error line; never a crash or another exception.
TEST(HfModel, ConfigJsonFuzzOnlyEverRefusesInOneLine) {
  TempDir dir;
  const Json base = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 40},
                     {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 2},
                     {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6},
                     {"rope_theta", 10000.0}, {"max_position_embeddings", 256}, {"hidden_act", "silu"},
                     {"tie_word_embeddings", false},
                     {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 128}}},
                     {"lct", {{"attention_kernel", "dca"}, {"dca_chunk_size", 64}, {"dca_local_size", 8}}}};
  const std::vector<Json> values = {Json("16"), Json(16.0), Json(true), Json(nullptr), Json::array({16}),
                                    Json::object(), Json(-1), Json(0), Json(int64_t(1) << 40),
                                    Json(uint64_t(1) << 63), Json(1e300), Json(-1e-300), Json("yarn"), Json("")};
  std::mt19937_64 rng(54);
  int accepted = 0, refused = 0;
  const auto key_of = [&](const Json& obj) {
    auto it = obj.begin();
    std::advance(it, long(rng() % obj.size()));
    return it.key();
  };
  for (int trial = 0; trial < 3000; ++trial) {
    Json j = base;
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      Json& obj = (rng() % 4 == 0) ? j["rope_scaling"] : (rng() % 4 == 0) ? j["lct"] : j;
      if (!obj.is_object() || obj.empty()) continue;
      switch (rng() % 3) {
        case 0: obj[key_of(obj)] = values[rng() % values.size()]; break;
        case 1: obj.erase(key_of(obj)); break;
        default: obj["unknown_" + std::to_string(rng() % 3)] = values[rng() % values.size()]; break;
      }
    }
    std::string text = j.dump();
    switch (rng() % 6) {
      case 0: text += std::string(1, '\0') + "garbage"; break;
      case 1: text.insert(rng() % text.size(), 1, '\0'); break;
      case 2: text.resize(rng() % text.size()); break;
      default: break;
    }
    write_file(dir.file("config.json"), text);
    try {
      const LlamaConfig c = read_hf_config(dir.file("config.json"));
      EXPECT_EQ(c.validate(), "");
      EXPECT_EQ(text.find('\0'), std::string::npos) << "a config.json with a NUL was read";
      ++accepted;
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(accepted, 100);
}

LlamaConfig tiny(bool tied) { return test::llama_shape(40, 16, 24, 2, 4, 2, tied); }

TEST(HfModel, FolderRoundTripIsBitExact) {
  for (const bool tied : {false, true}) {
    TempDir dir;
    LlamaConfig c = tiny(tied);
    c.rope_scaling = RopeScaling::yarn;
    c.rope_scaling_factor = 4.0;
    c.rope_original_length = 256;
    c.attention_kernel = AttentionKernel::dca;
    c.dca_chunk_size = 64;
    c.dca_local_size = 16;
    LlamaModel m(c);
    init_llama_params(m.table(), c, 7, m.params.data());
    const std::string out = dir.file("hf");
    write_hf_model(out, c, m.table(), m.params.data(), 256, SafetensorsDtype::f32);
    ASSERT_TRUE(is_hf_model_path(out));
    const HfModelFiles files = find_hf_model_files(out);
    const LlamaConfig back = read_hf_config(files.config);
    EXPECT_EQ(back.hidden_size, c.hidden_size);
    EXPECT_EQ(back.tie_word_embeddings, tied);
    EXPECT_EQ(back.rope_scaling, RopeScaling::yarn);
    EXPECT_EQ(back.rope_scaling_factor, 4.0);
    EXPECT_EQ(back.rope_original_length, 256);
    EXPECT_EQ(back.attention_kernel, AttentionKernel::dca);
    EXPECT_EQ(back.dca_chunk_size, 64);
    LlamaModel r(back);
    read_hf_params(files, back, r.table(), r.params.data());
    ASSERT_EQ(r.params.size(), m.params.size());
    EXPECT_EQ(std::memcmp(r.params.data(), m.params.data(), m.params.size() * sizeof(float)), 0);
    const Json j = Json::parse(std::ifstream(files.config));
    EXPECT_EQ(j["max_position_embeddings"], 1024);  // yarn: the scaled length
    EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 256);
    SafetensorsFile st(files.weights[0]);
    EXPECT_EQ(st.find("lm_head.weight") != nullptr, !tied);
    EXPECT_EQ(st.metadata().at("format"), "pt");
    EXPECT_EQ(st.metadata().at("lct.attention_kernel"), "dca");
  }
}

TEST(HfModel, ConfigsLctCannotRepresentAreRefusedByKey) {
  TempDir dir;
  const Json base = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 40},
                     {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 2},
                     {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6},
                     {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
  const auto refusal_of = [&](const Json& j) {
    write_file(dir.file("config.json"), j.dump());
    try {
      read_hf_config(dir.file("config.json"));
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal_of(base), "");
  const auto expect = [&](Json j, const std::string& part) {
    const std::string why = refusal_of(j);
    EXPECT_NE(why.find(part), std::string::npos) << "wanted '" << part << "', got '" << why << "'";
  };
  Json j = base;
  j.erase("hidden_size");
  expect(j, "hidden_size: missing");
  // each key's value lct refuses, and what the refusal says; each field has the JSON type
  // transformers builds from (issue 54, cause 6), and a refusal quotes the value as the
  // file has it
  const std::vector<std::tuple<std::string, Json, std::string>> refused = {
      {"attention_bias", true, "attention_bias: true, lct's Llama has no biases"},
      {"hidden_act", "gelu", "hidden_act: \"gelu\", lct's MLP is SwiGLU"},
      {"num_local_experts", 8, "num_local_experts: a mixture of experts"},
      {"model_type", "mistral", "model_type: \"mistral\", lct reads Llama"},
      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}, "rope type 'llama3'"},
      {"rope_scaling",
       {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 16}, {"original_max_position_embeddings", 64}},
       "rope_scaling.beta_fast: 16"},
      {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}, {"low_freq_factor", 1.0}}, "rope_scaling.low_freq_factor"},
      {"head_dim", 8, "head_dim: 8"},
      {"num_attention_heads", 5, "num_attention_heads"},
      {"vocab_size", "many", "vocab_size"},
      {"tie_word_embeddings", "false", "tie_word_embeddings: \"false\" is not true or false"},  // Python would tie
      {"hidden_size", "16", "hidden_size: \"16\" is not an integer"},
      {"num_hidden_layers", 2.0, "num_hidden_layers: 2.0 is not an integer"},
      {"rms_norm_eps", "1e-6", "rms_norm_eps: \"1e-6\" is not a number"},
      {"rope_scaling", {{"type", "linear"}, {"factor", "2"}}, "rope_scaling.factor: \"2\" is not a number"},
      {"lct", {{"attention_kernel", "dca"}, {"dca_chunk_size", "64"}, {"dca_local_size", 8}},
       "lct.dca_chunk_size: \"64\" is not an integer"},
      {"head_dim", "4", "head_dim: \"4\", lct's head_dim is hidden_size / num_attention_heads = 4"}};
  for (const auto& [key, value, part] : refused) {
    j = base;
    j[key] = value;
    expect(j, part);
  }
  {  // a NUL ends nlohmann's input: config.json must be one JSON value
    write_file(dir.file("config.json"), base.dump() + std::string(1, '\0') + "garbage");
    try {
      read_hf_config(dir.file("config.json"));
      ADD_FAILURE() << "a config.json with a NUL and garbage after its object was read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("is a NUL"), std::string::npos) << e.what();
    }
  }
  {  // rope_type before the older type, as transformers reads them
    j = base;
    j["rope_scaling"] = {{"rope_type", "linear"}, {"type", "dynamic"}, {"factor", 2.0}};
    write_file(dir.file("config.json"), j.dump());
    EXPECT_EQ(read_hf_config(dir.file("config.json")).rope_scaling, RopeScaling::linear);
  }
  // accepted: rope_parameters (newer transformers) and linear scaling
  j = base;
  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 500000.0}, {"factor", 2.0}};
  write_file(dir.file("config.json"), j.dump());
  const LlamaConfig c = read_hf_config(dir.file("config.json"));
  EXPECT_EQ(c.rope_scaling, RopeScaling::linear);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling_factor, 2.0);
}

TEST(HfModel, TensorsLctsModelLacksAreRefusedByName) {
  TempDir dir;
  const LlamaConfig c = tiny(false);
  LlamaModel m(c);
  init_llama_params(m.table(), c, 7, m.params.data());
  const std::string out = dir.file("hf");
  write_hf_model(out, c, m.table(), m.params.data(), 128, SafetensorsDtype::bf16);
  // add a bias: the weights rewritten with one more tensor
  std::vector<SafetensorsTensor> tensors;
  for (const TensorSpec& s : m.table().specs()) tensors.push_back({s.name, s.shape, m.params.data() + s.offset});
  const std::vector<float> bias(16, 0.0f);
  tensors.push_back({"model.layers.0.self_attn.q_proj.bias", {16}, bias.data()});
  write_file(out + "/model.safetensors", safetensors_bytes(tensors, SafetensorsDtype::f32, {}));
  LlamaModel r(c);
  try {
    read_hf_params(find_hf_model_files(out), c, r.table(), r.params.data());
    FAIL() << "a bias was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("q_proj.bias': a bias"), std::string::npos) << e.what();
  }
  // a tensor missing
  tensors.pop_back();
  tensors.erase(tensors.begin() + 1);
  write_file(out + "/model.safetensors", safetensors_bytes(tensors, SafetensorsDtype::f32, {}));
  try {
    read_hf_params(find_hf_model_files(out), c, r.table(), r.params.data());
    FAIL() << "a missing tensor was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor '" + m.table().specs()[1].name + "'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lct::hf_test

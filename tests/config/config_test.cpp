// Config registry: defaults equal configs/default.toml, file and command-line
// precedence, and one-line errors naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "attention/attention_mask.h"
#include "attention/core_attention.h"
#include "compute/gemm.h"
#include "data/balance.h"
#include "data/context_shards.h"
#include "data/doc_lengths.h"
#include "data/local_batch.h"
#include "data/sources.h"
#include "model/optimizer.h"
#include "model/recompute.h"
#include "model/rope.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "src/config/config.h"
#include "tests/test_util.h"

namespace lct::config_test {  // the file's own namespace: a unity build compiles test files together
namespace {
using test::error_of;

std::string write_temp(const std::string& content) {
  const auto p = std::filesystem::temp_directory_path() /
                 ("lct_cfg_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(p) << content;
  return p.string();
}

// Every choice enum's table (compute/enum_names.h): its values are 0 .. N-1 once each
// (no value left without a name), its names are distinct, and each value prints and
// parses back through the same table; an unknown name lists every choice.
template <typename E, size_t N>
void check_enum_table(const EnumName<E> (&table)[N], const char* what) {
  std::set<std::string> names;
  std::set<int> values;
  for (const EnumName<E>& e : table) {
    EXPECT_TRUE(names.insert(e.name).second) << what << ": name '" << e.name << "' twice";
    EXPECT_TRUE(values.insert(int(e.value)).second) << what << ": value " << int(e.value) << " twice";
    EXPECT_STREQ(enum_name(table, e.value), e.name) << what;
    if (e.settable)
      EXPECT_EQ(parse_enum(table, e.name, what), e.value) << what << " " << e.name;
    else  // derived, never a setting
      EXPECT_THROW(parse_enum(table, e.name, what), std::invalid_argument) << what << " " << e.name;
  }
  EXPECT_EQ(*values.begin(), 0) << what;
  EXPECT_EQ(*values.rbegin(), int(N) - 1) << what << ": a value between has no name";
  try {
    parse_enum(table, "no-such-choice", what);
    ADD_FAILURE() << what << " parsed an unknown name";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "unknown " + std::string(what) + " 'no-such-choice' (expected: " +
                                         enum_choices(table) + ")");
  }
}

// --help lists every value a choice key accepts: the values its parser names when it
// refuses one ("(expected: a, b, c)") each appear in the key's help, which is made from
// the same table (enum_help).
TEST(Config, EveryChoiceKeyListsItsChoicesInHelp) {
  int choices = 0;
  for (const ConfigKey& k : config_keys()) {
    if (k.type != KeyType::string) continue;
    Config c;
    std::string error;
    try {
      k.set(c, "no-such-choice");
    } catch (const ConfigError& e) {
      error = e.what();
    }
    const size_t at = error.find("(expected: ");
    if (at == std::string::npos) continue;  // a name or a path: any text
    ++choices;
    std::stringstream list(error.substr(at + 11, error.find(')', at) - at - 11));
    std::string name;
    while (std::getline(list, name, ',')) {
      name.erase(0, name.find_first_not_of(' '));
      EXPECT_NE(k.help.find(name), std::string::npos) << k.name << " --help does not list '" << name << "': " << k.help;
    }
  }
  EXPECT_GE(choices, 16);  // every choice key refuses an unknown value with its list
}

// One key scope decides what a resumed run must keep and what lct eval may change.
TEST(Config, KeyScopesDecideResumeAndEval) {
  const std::string base = config_to_toml(Config{});
  const auto with = [](const std::string& key, const std::string& value) {
    Config c;
    find_config_key(key)->set(c, value);
    return config_to_toml(c);
  };
  EXPECT_THROW(resume_warnings(with("model.hidden_size", "128"), "ck", base), std::runtime_error);
  EXPECT_THROW(resume_warnings(with("attention.window", "7"), "ck", base), std::runtime_error);
  EXPECT_THROW(resume_warnings(with("model.rope_scaling", "linear"), "ck", base), std::runtime_error);
  EXPECT_EQ(resume_warnings(with("attention.placement", "cad"), "ck", base),
            std::vector<std::string>{"resuming with attention.placement = colocated (checkpoint had cad)"});
  EXPECT_EQ(resume_warnings(with("train.lr", "0.5"), "ck", base).size(), 1u);
  EXPECT_TRUE(resume_warnings(with("train.steps", "7"), "ck", base).empty());
  EXPECT_TRUE(resume_warnings(with("train.resume", "auto"), "ck", base).empty());
  EXPECT_TRUE(resume_warnings(base, "ck", base).empty());
  for (const char* key : {"attention.kernel", "attention.mask", "attention.dca_chunk_size", "model.rope_scaling",
                          "model.rope_original_length"})
    EXPECT_EQ(find_config_key(key)->scope, KeyScope::function) << key;  // lct eval may override them
  for (const char* key : {"model.hidden_size", "model.rope_theta"})
    EXPECT_EQ(find_config_key(key)->scope, KeyScope::model) << key;
  EXPECT_EQ(find_config_key("attention.cad_profile")->scope, KeyScope::placement);
  EXPECT_EQ(find_config_key("train.lr")->scope, KeyScope::setting);
}

TEST(Config, EveryChoiceEnumRoundTripsThroughItsTable) {
  check_enum_table(kRopeScalingNames, "RoPE scaling");
  check_enum_table(kRecomputeNames, "recompute mode");
  check_enum_table(kOptimizerNames, "optimizer");
  check_enum_table(kPrecisionNames, "precision");
  check_enum_table(kFp32LibraryNames, "fp32 GEMM library");
  check_enum_table(kMaskKindNames, "attention mask");
  check_enum_table(kAttentionKernelNames, "attention kernel");
  check_enum_table(kCpCommNames, "context-parallel exchange");
  check_enum_table(kPlacementNames, "attention placement");
  check_enum_table(kPipelineScheduleNames, "pipeline schedule");
  check_enum_table(kPipeOpNames, "pipeline action");
  check_enum_table(kDataSourceNames, "data source");
  check_enum_table(kTokenDtypeNames, "token dtype");
  check_enum_table(kLossOnNames, "loss target");
  check_enum_table(kDocLengthDistNames, "document-length distribution");
  check_enum_table(kDpBalanceNames, "data-parallel balance");
  check_enum_table(kCpSplitNames, "context-parallel split");
  // the placement the run plan derives prints, but the config key does not take it
  EXPECT_EQ(parse_placement("cad"), Placement::cad);
  EXPECT_THROW(parse_placement("context-parallel"), std::invalid_argument);
}

TEST(Config, DefaultTomlEqualsBuiltInDefaults) {
  Config from_file;
  apply_toml_file(from_file, std::string(LCT_SOURCE_DIR) + "/configs/default.toml");
  EXPECT_EQ(config_to_toml(from_file), config_to_toml(Config{}));
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c;
  c.data.separator = "it's \"quoted\"\n";
  c.train.lr = 1.5e-4;
  c.model.tie_word_embeddings = true;
  const std::string path = write_temp(config_to_toml(c));
  Config back;
  apply_toml_file(back, path);
  EXPECT_EQ(config_to_toml(back), config_to_toml(c));
}

TEST(Config, CommandLineOverridesFile) {
  const std::string path = write_temp("[train]\nsteps = 7\nlr = 0.5\n[data]\nseq_len = 64\n");
  Config c;
  apply_toml_file(c, path);
  apply_overrides(c, {{"train.steps", "9"}});
  EXPECT_EQ(c.train.steps, 9);
  EXPECT_EQ(c.train.lr, 0.5);
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_EQ(c.model.hidden_size, Config{}.model.hidden_size);
}

// Keys set away from their defaults that cannot act get a warning each (issue 54 cause
// 12: train.bf16_kernel under fp32 was accepted silently); keys that act get none.
TEST(Config, InertKeysAreNamedWithWhatMakesThemInert) {
  const auto inert = [](const std::map<std::string, std::string>& o) {
    Config c;
    apply_overrides(c, o);
    return inert_keys(c);
  };
  EXPECT_TRUE(inert({}).empty());
  EXPECT_EQ(inert({{"train.bf16_kernel", "native"}}),
            std::vector<std::string>{"train.bf16_kernel = native does nothing under train.precision = fp32"});
  EXPECT_TRUE(inert({{"train.bf16_kernel", "native"}, {"train.precision", "bf16"}}).empty());
  EXPECT_EQ(inert({{"attention.window", "8"}}),
            std::vector<std::string>{"attention.window = 8 does nothing under attention.mask = causal"});
  EXPECT_TRUE(inert({{"attention.window", "8"}, {"attention.mask", "sliding_window"}}).empty());
  EXPECT_EQ(inert({{"attention.dca_mscale", "1.5"}}),
            std::vector<std::string>{"attention.dca_mscale = 1.5 does nothing under attention.kernel = causal"});
  EXPECT_EQ(inert({{"model.rope_scaling_factor", "2"}}),
            std::vector<std::string>{"model.rope_scaling_factor = 2.0 does nothing under model.rope_scaling = none"});
  EXPECT_EQ(inert({{"data.passkey_depth", "0.5"}}).size(), 1u);
  EXPECT_EQ(inert({{"attention.logit_scaling_length", "64"}}).size(), 1u);
}

TEST(Config, ErrorsNameTheKeyAndFile) {
  Config c;
  EXPECT_NE(error_of([&] { apply_toml_file(c, write_temp("[model]\nhiden_size = 3\n")); })
                .find("unknown key 'model.hiden_size'"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_file(c, write_temp("[model]\nhidden_size = \"big\"\n")); })
                .find("model.hidden_size must be an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_file(c, write_temp("[model\n")); }).find(".toml':"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"train.steps", "ten"}}); })
                .find("train.steps must be an integer, got 'ten'"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"train.steps", "0"}}); }).find("train.steps must be >= 1"),
            std::string::npos);
  // integers are read whole (issue 54 cause 5): no spaces, no '+', nothing after a NUL,
  // and a value beyond int64 is out of range, not "not an integer"
  for (const std::string& bad : std::vector<std::string>{" 5", "5 ", "+5", std::string("5\0" "7", 3), "5e2", "-", ""})
    EXPECT_NE(error_of([&] { apply_overrides(c, {{"train.steps", bad}}); }).find("train.steps must be an integer"),
              std::string::npos) << "'" << bad << "'";
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"train.steps", "9223372036854775808"}}); })
                .find("train.steps must be <= 9223372036854775807, got 9223372036854775808"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"data.separator_id", "-9223372036854775809"}}); })
                .find("data.separator_id must be >= -9223372036854775808"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"data.doc_lengths", "zipf"}}); }).find("data.doc_lengths"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"attention.kernel", "sparse"}}); }).find("attention.kernel"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_overrides(c, {{"nope.key", "1"}}); }).find("unknown key 'nope.key'"),
            std::string::npos);
}

TEST(Config, CrossFieldValidation) {
  Config c;
  c.model.num_attention_heads = 6;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("model.hidden_size (256) must be divisible"),
            std::string::npos);
  c = Config{};
  c.model.num_key_value_heads = 3;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("model.num_key_value_heads"), std::string::npos);
  c = Config{};
  c.data.source = DataSource::text;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("data.path is required"), std::string::npos);
  c = Config{};
  c.data.min_doc_len = 5000;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("data.min_doc_len"), std::string::npos);
  EXPECT_EQ(error_of([&] { validate_config(Config{}); }), "");
}

}  // namespace
}  // namespace lct::config_test

namespace lct::config_test {
namespace {
TEST(Config, ReadmeDocumentsEveryKey) {
  std::ifstream in(std::string(LCT_SOURCE_DIR) + "/README.md");
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const ConfigKey& k : config_keys())
    EXPECT_NE(readme.find("`" + k.name), std::string::npos) << k.name << " is not in README.md";
}

// The README's key table ("| `key` | default | meaning |", several keys per row allowed
// with comma-separated defaults) states the built-in defaults.
TEST(Config, ReadmeKeyTableDefaultsAreTheBuiltInOnes) {
  std::ifstream in(std::string(LCT_SOURCE_DIR) + "/README.md");
  const Config defaults;
  std::string line;
  int checked = 0;
  const auto split = [](const std::string& text, const std::string& by) {
    std::vector<std::string> out;
    size_t at = 0;
    while (true) {
      const size_t next = text.find(by, at);
      out.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
      if (next == std::string::npos) return out;
      at = next + by.size();
    }
  };
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::vector<std::string> cells = split(line, " | ");
    if (cells.size() < 3) continue;
    std::vector<std::string> names;
    for (const std::string& n : split(cells[0].substr(2), ", "))
      names.push_back(n.substr(1, n.size() - 2));  // strip the backticks
    if (!find_config_key(names[0])) continue;      // another table
    const std::vector<std::string> values =
        names.size() == 1 ? std::vector<std::string>{cells[1]} : split(cells[1], ", ");
    ASSERT_EQ(values.size(), names.size()) << line;
    for (size_t i = 0; i < names.size(); ++i) {
      const ConfigKey* k = find_config_key(names[i]);
      ASSERT_NE(k, nullptr) << names[i];
      const std::string want = k->get(defaults);
      std::string got = values[i];
      if (got == "\"\"") got.clear();
      if (k->type == KeyType::integer || k->type == KeyType::number)
        EXPECT_EQ(std::stod(got), std::stod(want)) << names[i] << ": README says " << got;
      else
        EXPECT_EQ(got, want) << names[i] << ": README says " << got;
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(config_keys().size()));  // every key has a row
}
}  // namespace
}  // namespace lct::config_test

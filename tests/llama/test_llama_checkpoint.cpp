// The llama2.c checkpoint reader (sim/io/llama_checkpoint) on the shipped stories260K file (its
// README's 40 greedy ids after BOS), a version-1 file written here from the same arrays, and
// hostile files: truncated, trailing bytes, a header no model fits, an unknown version, NaN/inf.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <limits>
#include <vector>

#include "io/llama_checkpoint.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/llama/generation.hpp"
#include "kernel/llama/llama_forward.hpp"

using namespace rcsim;

namespace {

const std::string kModel = std::string(RCSIM_SOURCE_DIR) + "/configs/models/stories260K/stories260K.bin";

const std::vector<int> kGreedy40 = {461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299, 362, 409,
                                    283, 264, 283, 452, 288, 13,  431, 431, 431, 431, 431, 431, 431, 431,
                                    431, 431, 431, 431, 431, 293, 430, 417, 363, 416, 315, 342};

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_temp(const std::string& name, const std::vector<char>& bytes) {
  const auto dir = std::filesystem::temp_directory_path() / ("rcsim_llama_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

void put_int(std::vector<char>& b, std::size_t offset, std::int32_t v) { std::memcpy(b.data() + offset, &v, 4); }
void put_float(std::vector<char>& b, std::size_t offset, float v) { std::memcpy(b.data() + offset, &v, 4); }

void append(std::vector<char>& b, const Matrix& m) {  // row-major float32
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      const float f = static_cast<float>(m(i, j));
      const char* p = reinterpret_cast<const char*>(&f);
      b.insert(b.end(), p, p + 4);
    }
}

// export.py's version1_export layout, from the arrays of `m`.
std::vector<char> version1(const llama::LlamaModel& m) {
  const llama::LlamaConfig& c = m.config;
  std::vector<char> b(256, 0);
  put_int(b, 0, 0x616b3432);
  put_int(b, 4, 1);
  const int header[7] = {c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.vocab, c.seq_len};
  for (int i = 0; i < 7; ++i) put_int(b, 8 + 4 * static_cast<std::size_t>(i), header[i]);
  b[36] = 1;  // shared classifier
  for (const auto& x : m.blocks) append(b, x.attn_norm.transpose());
  for (const auto& x : m.blocks) append(b, x.mlp_norm.transpose());
  append(b, m.final_norm.transpose());
  append(b, m.embedding);
  for (auto w : {&llama::LlamaBlock::wq, &llama::LlamaBlock::wk, &llama::LlamaBlock::wv, &llama::LlamaBlock::wo,
                 &llama::LlamaBlock::w1, &llama::LlamaBlock::w2, &llama::LlamaBlock::w3})
    for (const auto& x : m.blocks) append(b, x.*w);
  return b;
}

}  // namespace

TEST_CASE("llama stories260K: the README's 40 greedy ids after BOS, float64 and float32", "[llama]") {
  const LlamaCheckpoint ck = read_llama_checkpoint(kModel);
  CHECK(ck.version == 0);
  CHECK(ck.sha256 == "9414d5a285453a7eab631713d171753232c978f6f97654211469aff8be93c8d6");
  const llama::LlamaConfig& c = ck.model.config;
  CHECK((c.dim == 64 && c.hidden == 172 && c.layers == 5 && c.heads == 8 && c.kv_heads == 4 && c.vocab == 512 &&
         c.seq_len == 512 && c.shared_classifier));
  llama::GenerateOptions o;
  o.steps = 40;
  CHECK(llama::generate(ck.model, o) == kGreedy40);
  o.single = true;
  CHECK(llama::generate(ck.model, o) == kGreedy40);
}

TEST_CASE("llama version-1 checkpoint reads as the same model", "[llama]") {
  const LlamaCheckpoint legacy = read_llama_checkpoint(kModel);
  const LlamaCheckpoint v1 = read_llama_checkpoint(write_temp("v1.bin", version1(legacy.model)));
  CHECK(v1.version == 1);
  const std::vector<int> ids = {1, 461, 461, 401, 7, 300};
  CHECK(llama::sequence_logits(v1.model, ids, false) == llama::sequence_logits(legacy.model, ids, false));
}

TEST_CASE("llama hostile checkpoints: one message naming the file and the problem", "[llama]") {
  const std::vector<char> good = bytes_of(kModel);
  REQUIRE(good.size() == 1056540);
  const auto refused = [](const std::vector<char>& b, const std::string& name, const std::string& what) {
    const std::string path = write_temp(name, b);
    CHECK_THROWS_AS(read_llama_checkpoint(path), UsageError);
    CHECK_THROWS_WITH(read_llama_checkpoint(path), Catch::Contains(name) && Catch::Contains(what));
  };
  refused(std::vector<char>(good.begin(), good.begin() + 20), "short.bin", "shorter than the 28-byte header");
  refused(std::vector<char>(good.begin(), good.end() - 4), "truncated.bin", "needs 1056540 (truncated)");
  std::vector<char> longer = good;
  longer.push_back(0);
  refused(longer, "longer.bin", "(trailing bytes)");
  std::vector<char> header = good;
  put_int(header, 0, 65);  // dim 65: 8 heads do not divide it
  refused(header, "header.bin", "n_heads 8 does not divide dim 65");
  put_int(header, 0, -3);
  refused(header, "negative.bin", "every size must be positive");
  std::vector<char> v2 = version1(read_llama_checkpoint(kModel).model);
  put_int(v2, 4, 2);
  refused(v2, "v2.bin", "format version 2 found");
  std::vector<char> nan = good;
  put_float(nan, 28 + 4 * (512 * 64 + 5 * 64 + 3), std::numeric_limits<float>::quiet_NaN());  // wq of layer 0, entry 3
  refused(nan, "nan.bin", "non-finite value (nan) in wq of layer 0 at entry 3");
  std::vector<char> inf = good;
  put_float(inf, 28 + 4 * 5, std::numeric_limits<float>::infinity());
  refused(inf, "inf.bin", "(inf) in token_embedding at entry 5");
  CHECK_THROWS_WITH(read_llama_checkpoint("/nonexistent/x.bin"), Catch::Contains("cannot be opened"));
}

TEST_CASE("llama checkpoints through the hardened reader: regular files only, the path whole", "[llama]") {
  // A path with a NUL byte (from Python) names another file for open(): refused, not truncated.
  const std::string nul = std::string(kModel) + std::string(1, '\0') + "trailing";
  CHECK_THROWS_AS(read_llama_checkpoint(nul), UsageError);
  CHECK_THROWS_WITH(read_llama_checkpoint(nul), Catch::Contains("NUL byte"));
  const auto dir = std::filesystem::temp_directory_path() / ("rcsim_llama_fifo_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH(read_llama_checkpoint(dir.string()), Catch::Contains("is a directory"));
  const std::string fifo = (dir / "m.fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_llama_checkpoint(fifo), Catch::Contains("is a FIFO"));  // at once: opened non-blocking
  CHECK_THROWS_WITH(read_llama_checkpoint("/dev/zero"), Catch::Contains("is a device"));
  std::filesystem::remove_all(dir);
}

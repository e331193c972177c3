// The rill binary end to end: `rill run` on a fixture (no tokenizer files) reproduces the
// transformers greedy continuation; bad --prompt-ids, bad model directories and bad shapes give
// one-line errors and a non-zero exit code (a busy port before the model loads); make-model is deterministic.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/run_rill.h"

namespace {
namespace fs = std::filesystem;

using Result = rill::test::ProcessResult;
Result run(const std::string& args) { return rill::test::run_rill(args); }

const std::string kFixture = std::string(RILL_SOURCE_DIR) + "/tests/fixtures/models/qwen3-tiny";

// `rill <args>` on the fixture model exits with 1 and an error naming `names`.
void expect_refused(const std::string& command, const std::string& args, const std::string& names) {
  Result r = run(command + " --model " + kFixture + " --device cpu " + args);
  EXPECT_EQ(r.code, 1) << args;
  EXPECT_NE(r.err.find(names), std::string::npos) << r.err;
}

TEST(Cli, RunGreedyMatchesTransformers) {
  std::ifstream in(kFixture + "/reference.json");
  auto ref = nlohmann::json::parse(in);
  std::string ids;
  for (auto& t : ref["prompts"][1]) ids += (ids.empty() ? "" : ",") + std::to_string(t.get<int>());
  // The fixture's eos (id 2) must not cut the comparison short: compare up to the first eos.
  Result r = run("run --model " + kFixture + " --device cpu --prompt-ids " + ids + " --max-tokens 32 --print-ids");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<int> expect;
  for (auto& t : ref["greedy"][1]) {
    expect.push_back(t.get<int>());
    if (t.get<int>() == 2) break;
  }
  std::vector<int> got;
  std::istringstream s(r.out);
  for (int v; s >> v;) got.push_back(v);
  EXPECT_EQ(got, expect);
}

TEST(Cli, ModelDirectoryAsFirstArgument) {
  // `rill run DIR ...` is `rill run --model DIR ...`; two directories are refused.
  const std::string args = " --device cpu --prompt-ids 1,2,3 --max-tokens 8 --print-ids";
  Result named = run("run --model " + kFixture + args);
  Result positional = run("run " + kFixture + args);
  ASSERT_EQ(named.code, 0) << named.err;
  ASSERT_EQ(positional.code, 0) << positional.err;
  EXPECT_EQ(positional.out, named.out);
  Result two = run("run " + kFixture + " " + kFixture + args);
  EXPECT_NE(two.code, 0);
  EXPECT_NE(two.err.find(kFixture), std::string::npos) << two.err;
}

TEST(Cli, ServePortInUseIsRefusedBeforeTheModelLoads) {
  // A port this test holds: `rill serve` takes its address first, so the error names the address even though
  // the model directory does not exist either.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  Result r = run("serve /nonexistent/model/dir --device cpu --port " + port);
  ::close(fd);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("127.0.0.1:" + port), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("/nonexistent/model/dir"), std::string::npos) << r.err;
}

// `rill` alone prints the commands (exit 0), as `rill --help` does.
TEST(Cli, NoArgumentsPrintsTheCommands) {
  Result r = run("");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, run("--help").out);
  for (const char* command : {"Usage: rill", "run ", "serve ", "bench "})
    EXPECT_NE(r.out.find(command), std::string::npos) << command << " in " << r.out;
}

TEST(Cli, BadPromptIds) {
  for (const char* bad : {"1,abc,3", "1,-4", "5,1000", "1,99999999999999999999", "\"\""}) {
    Result r = run("run --model " + kFixture + " --device cpu --prompt-ids " + bad + " --print-ids");
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find("--prompt-ids"), std::string::npos) << bad << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << bad;
  }
}

TEST(Cli, BadModelDirectory) {
  Result r = run("run --model /nonexistent/dir --prompt-ids 1,2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/dir"), std::string::npos) << r.err;
  fs::path tmp = fs::temp_directory_path() / ("rill-cli-model-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  std::ofstream(tmp / "config.json") << "{\"architectures\": [\"Qwen3ForCausalLM\"]}";
  r = run("run --model " + tmp.string() + " --device cpu --prompt-ids 1,2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("hidden_size"), std::string::npos) << r.err;
  fs::remove_all(tmp);
}

TEST(Cli, BadSamplingValues) {
  Result r = run("run --model " + kFixture + " --device cpu --prompt-ids 1,2 --top-p 1.5");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--top-p"), std::string::npos) << r.err;
  r = run("run --model " + kFixture + " --device cpu --prompt-ids 1,2 --max-tokens 0");
  EXPECT_NE(r.err.find("--max-tokens"), std::string::npos) << r.err;
}

TEST(Cli, BadServeEngineFlags) {
  // Checked before the model loads: one-line errors naming the flag.
  expect_refused("serve", "--batch-invariant maybe", "--batch-invariant");
  expect_refused("serve", "--session-pinned-fraction 2", "--session-pinned-fraction");
  expect_refused("serve", "--log-stats-interval -1", "--log-stats-interval");
  expect_refused("serve", "--max-batched-tokens 0", "--max-batched-tokens");
  expect_refused("serve", "--speculative-tokens 33", "--speculative-tokens");
  expect_refused("serve", "--speculative-tokens -1", "--speculative-tokens");
  expect_refused("serve", "--speculative-ngram-min 0", "--speculative-ngram-min");
  expect_refused("serve", "--speculative-ngram-min 3 --speculative-ngram-max 2", "--speculative-ngram-max");
  expect_refused("bench-serve", "--speculative-max-running 0", "--speculative-max-running");
}

TEST(Cli, BadBenchLists) {
  // The comma lists of `bench` and the cells of `bench-serve` are checked before the model loads.
  expect_refused("bench", "--prompt-len 16,0", "--prompt-len");
  expect_refused("bench-serve", "--cells 4:16", "--cells");
  expect_refused("bench-serve", "--cells 4:x:8", "--cells");
  expect_refused("bench-serve", "--cells 0:16:8", "--concurrency");
}

TEST(Cli, BenchPrintsFiguresAndHostTimes) {
  // One line a figure (scripts collect them); --host-times adds the decode step's host breakdown;
  // the decode line names how steps were fed.
  Result r = run("bench --model " + kFixture + " --device cpu --prompt-len 8 --decode-tokens 3 --host-times");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* key : {"prefill_tokens_per_s ", "decode_tokens_per_s ", "decode_host_us build "})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " missing from:\n" << r.out;
  EXPECT_NE(r.out.find("(medians of 3 steps)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ids fed on the device, read one step behind"), std::string::npos) << r.out;
  Result plain = run("bench --model " + kFixture + " --device cpu --prompt-len 8 --decode-tokens 2");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("decode_host_us"), std::string::npos) << plain.out;
  // --sync-steps: the loop that reads each step's ids before queueing the next.
  Result sync = run("bench --model " + kFixture + " --device cpu --prompt-len 8 --decode-tokens 2 --sync-steps");
  ASSERT_EQ(sync.code, 0) << sync.err;
  EXPECT_NE(sync.out.find("each step's ids read before the next"), std::string::npos) << sync.out;
}

TEST(Cli, SeededSamplingIsReproducible) {
  std::string cmd = "run --model " + kFixture + " --device cpu --prompt-ids 4,5,6 --max-tokens 20 --temperature 0.8 --top-p 0.9 --top-k 50 --seed 7 --print-ids";
  Result a = run(cmd), b = run(cmd);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
}

TEST(Cli, MakeModelIsDeterministicAndLoads) {
  fs::path a = fs::temp_directory_path() / ("rill-mm-a-" + std::to_string(::getpid()));
  fs::path b = fs::temp_directory_path() / ("rill-mm-b-" + std::to_string(::getpid()));
  ASSERT_EQ(run("make-model --shape qwen3-tiny --out " + a.string()).code, 0);
  ASSERT_EQ(run("make-model --shape qwen3-tiny --out " + b.string()).code, 0);
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(a / "model.safetensors"), slurp(b / "model.safetensors"));
  Result r = run("run --model " + a.string() + " --device cpu --prompt-ids 1,2,3 --max-tokens 4 --print-ids");
  EXPECT_EQ(r.code, 0) << r.err;
  Result bad = run("make-model --shape qwen9-huge --out " + a.string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("qwen9-huge"), std::string::npos) << bad.err;
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace

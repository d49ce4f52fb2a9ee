// A deterministic mutation fuzzer, the main() of the fuzz targets where libFuzzer is not
// used (GCC builds; SATURN_FUZZ=OFF). It runs LLVMFuzzerTestOneInput on every seed file,
// then on `--runs` mutants (bit flips, interesting bytes, inserts, deletes, duplicated and
// spliced chunks, truncation) drawn from a fixed-seed xorshift generator, so a failure
// reproduces exactly with the same arguments. A crash aborts the process (CTest fails);
// on success it prints the number of executions.
//   fuzz_<target> [--runs=N] [--seed=S] [--max_len=L] SEED_FILE_OR_DIR...
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void Mutate(std::string* s, const std::vector<std::string>& seeds, size_t max_len, Rng* rng) {
  static const uint8_t kInteresting[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, '"', '{',  '}',  '[', ']',
                                         ',',  ':',  '-',  '0',  '9',  'e', 0xC3, 0xED, 0xF4};
  const int ops = 1 + static_cast<int>(rng->Below(4));
  for (int k = 0; k < ops; ++k) {
    switch (rng->Below(8)) {
      case 0:  // flip a bit
        if (!s->empty()) (*s)[rng->Below(s->size())] ^= static_cast<char>(1u << rng->Below(8));
        break;
      case 1:  // an interesting byte
        if (!s->empty()) {
          (*s)[rng->Below(s->size())] =
              static_cast<char>(kInteresting[rng->Below(sizeof(kInteresting))]);
        }
        break;
      case 2:  // insert random bytes
        s->insert(rng->Below(s->size() + 1),
                  std::string(1 + rng->Below(8), static_cast<char>(rng->Next())));
        break;
      case 3:  // delete a range
        if (!s->empty()) {
          const size_t at = rng->Below(s->size());
          s->erase(at, 1 + rng->Below(std::min<size_t>(16, s->size() - at)));
        }
        break;
      case 4:  // duplicate a chunk
        if (!s->empty()) {
          const size_t at = rng->Below(s->size());
          const std::string chunk = s->substr(at, 1 + rng->Below(32));
          s->insert(rng->Below(s->size() + 1), chunk);
        }
        break;
      case 5:  // splice with another seed
        if (!seeds.empty()) {
          const std::string& o = seeds[rng->Below(seeds.size())];
          *s = s->substr(0, rng->Below(s->size() + 1)) + o.substr(rng->Below(o.size() + 1));
        }
        break;
      case 6:  // truncate
        s->resize(rng->Below(s->size() + 1));
        break;
      default:  // a random digit string (numbers drive most parsers' branches)
        s->insert(rng->Below(s->size() + 1), std::to_string(static_cast<int64_t>(rng->Next())));
        break;
    }
  }
  if (s->size() > max_len) s->resize(max_len);
}

}  // namespace

int main(int argc, char** argv) {
  long long runs = 10000;
  uint64_t seed = 1;
  size_t max_len = 4096;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--runs=", 7) == 0) {
      runs = std::atoll(a + 7);
    } else if (std::strncmp(a, "--seed=", 7) == 0) {
      seed = std::strtoull(a + 7, nullptr, 10);
    } else if (std::strncmp(a, "--max_len=", 10) == 0) {
      max_len = std::strtoull(a + 10, nullptr, 10);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a)) {
        if (e.is_regular_file()) seeds.push_back(ReadAll(e.path()));
      }
    } else {
      seeds.push_back(ReadAll(a));
    }
  }
  if (seeds.empty()) seeds.push_back("");
  long long executions = 0;
  for (const std::string& s : seeds) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    ++executions;
  }
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  std::string current;
  for (long long i = 0; i < runs; ++i) {
    // Mostly stack mutations on the previous input; restart from a seed now and then.
    if (i % 16 == 0) current = seeds[rng.Below(seeds.size())];
    Mutate(&current, seeds, max_len, &rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(current.data()), current.size());
    ++executions;
  }
  std::printf("%s: %lld executions (%zu seeds, %lld mutants, seed %llu), no crash\n", argv[0],
              executions, seeds.size(), runs, static_cast<unsigned long long>(seed));
  return 0;
}

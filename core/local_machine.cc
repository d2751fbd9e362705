#include "core/local_machine.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/profile_yaml.h"
#include "core/units.h"

namespace dsplan {
namespace {

// The few NVML entry points used, by their C signatures (nvml.h: nvmlReturn_t is an enum whose
// success value is 0; nvmlDevice_t an opaque pointer; nvmlMemory_t three unsigned long longs).
using NvmlFn = int (*)();
using NvmlCountFn = int (*)(unsigned int*);
using NvmlHandleFn = int (*)(unsigned int, void**);
using NvmlNameFn = int (*)(void*, char*, unsigned int);
struct NvmlMemory {
  unsigned long long total, free, used;
};
using NvmlMemoryFn = int (*)(void*, NvmlMemory*);

bool Within(double a, double b, double rel) { return a > 0 && b > 0 && std::abs(a - b) <= rel * b; }

// The GPU's model in a driver name: its first word holding both letters and digits ("H100" in
// "NVIDIA H100 80GB HBM3", "A100" in "NVIDIA A100-SXM4-80GB", "T4" in "Tesla T4").
std::string ModelWord(const std::string& name) {
  std::string word;
  auto done = [&word] {
    const bool letter = std::any_of(word.begin(), word.end(), [](char c) {
      return std::isalpha(static_cast<unsigned char>(c));
    });
    const bool digit = std::any_of(word.begin(), word.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    return letter && digit;
  };
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += c;
    } else {
      if (done()) return word;
      word.clear();
    }
  }
  return done() ? word : std::string();
}

}  // namespace

namespace {

std::optional<LocalGpu> ReadLocalGpu() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return std::nullopt;
  auto sym = [lib](const char* n) { return dlsym(lib, n); };
  auto init = reinterpret_cast<NvmlFn>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlFn>(sym("nvmlShutdown"));
  auto count = reinterpret_cast<NvmlCountFn>(sym("nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<NvmlHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<NvmlNameFn>(sym("nvmlDeviceGetName"));
  auto memory = reinterpret_cast<NvmlMemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
  std::optional<LocalGpu> out;
  if (init && shutdown && count && handle && name && memory && init() == 0) {
    unsigned int n = 0;
    void* dev = nullptr;
    char buf[96] = {};
    NvmlMemory mem{};
    if (count(&n) == 0 && n > 0 && handle(0, &dev) == 0 && name(dev, buf, sizeof(buf) - 1) == 0 &&
        memory(dev, &mem) == 0 && mem.total > 0) {
      LocalGpu g;
      g.name = std::string(buf, strnlen(buf, sizeof(buf)));
      g.memory_bytes = static_cast<int64_t>(std::min<unsigned long long>(mem.total, INT64_MAX));
      g.count = static_cast<int>(std::min(n, 1u << 20));
      out = g;
    }
    shutdown();
  }
  dlclose(lib);
  return out;
}

}  // namespace

std::optional<LocalGpu> DetectLocalGpu() {
  static const std::optional<LocalGpu> gpu = ReadLocalGpu();
  return gpu;
}

bool ProfileDescribesGpu(const HardwareProfile& profile, const LocalGpu& local) {
  return Within(static_cast<double>(local.memory_bytes), profile.gpu.memory_bytes.value, 0.05);
}

std::optional<std::string> LocalGpuAdvice(const HardwareProfile& profile, const LocalGpu& local,
                                          const std::vector<ProfileGpu>& shipped) {
  const double want = profile.gpu.memory_bytes.value;
  if (local.memory_bytes <= 0 || ProfileDescribesGpu(profile, local)) return std::nullopt;
  // A shipped profile of this GPU: the same driver name, else the same model word with memory
  // within 10 % (another form factor of the card); measured profiles first.
  const std::string model = ModelWord(local.name);
  const ProfileGpu* best = nullptr;
  int best_rank = 0;
  for (const ProfileGpu& p : shipped) {
    int rank = 0;
    if (p.gpu_name == local.name) {
      rank = 4;
    } else if (!model.empty() && ModelWord(p.gpu_name) == model &&
               Within(static_cast<double>(local.memory_bytes), static_cast<double>(p.memory_bytes),
                      0.10)) {
      rank = 2;
    }
    if (rank == 0) continue;
    if (p.profile.size() > 9 && p.profile.compare(p.profile.size() - 9, 9, "-measured") == 0) {
      ++rank;
    }
    if (rank > best_rank) {
      best = &p;
      best_rank = rank;
    }
  }
  const std::string what =
      best ? fmt::format("pass --hardware {} ({}), or measure this machine with `dsplan profile`",
                         best->profile, best->gpu_name)
           : "measure it with `dsplan profile` and pass --hardware with that profile";
  return fmt::format(
      "this machine's GPU is {} ({}), but these numbers are for the default profile {} ({}, {}); "
      "if you will train on this kind of GPU, {}",
      local.name, FormatBytes(static_cast<double>(local.memory_bytes)), profile.name,
      profile.gpu.name, FormatBytes(want), what);
}

std::vector<ProfileGpu> ShippedProfileGpus(const std::string& data_dir) {
  std::vector<ProfileGpu> out;
  auto names = ListHardwareProfiles(data_dir);
  if (!names.ok()) return out;
  for (const std::string& n : *names) {
    auto p = FindHardwareProfile(n, data_dir);
    if (!p.ok()) continue;
    out.push_back({n, p->gpu.name, static_cast<int64_t>(p->gpu.memory_bytes.value)});
  }
  return out;
}

int PhysicalCores() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int phys = 0;
  while (std::getline(in, line)) {
    auto value = [&] { return std::atoi(line.substr(line.find(':') + 1).c_str()); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) cores.insert({phys, value()});
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Result<int64_t> HostRamBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") {
      if (kib <= 0 || kib > INT64_MAX / 1024) break;
      return kib * 1024;
    }
  }
  return Status::IoError("cannot read MemTotal from /proc/meminfo");
}

std::optional<LocalHost> DetectLocalHost() {
  auto ram = HostRamBytes();
  if (!ram.ok()) return std::nullopt;
  return LocalHost{*ram, PhysicalCores()};
}

std::optional<std::string> LocalHostAdvice(const HardwareProfile& profile, const LocalHost& local,
                                           bool ram_given, bool cores_given) {
  const double ram = profile.host.ram_bytes.value;
  const bool ram_differs =
      !ram_given && local.ram_bytes > 0 && !Within(static_cast<double>(local.ram_bytes), ram, 0.10);
  const bool cores_differ = !cores_given && local.cores > 0 && profile.host.cores > 0 &&
                            !Within(local.cores, profile.host.cores, 0.10);
  if (!ram_differs && !cores_differ) return std::nullopt;
  std::vector<std::string> have, assumed, why, flags;
  if (ram_differs) {
    have.push_back(fmt::format("{} of RAM", FormatBytes(static_cast<double>(local.ram_bytes))));
    assumed.push_back(FormatBytes(ram));
    why.push_back("host RAM bounds what offload and model loading may use");
    // Whole GiB, rounded down: a value --host-memory accepts and never above this machine's.
    flags.push_back(fmt::format("--host-memory {}GiB", local.ram_bytes >> 30));
  }
  if (cores_differ) {
    have.push_back(fmt::format("{} CPU cores", local.cores));
    assumed.push_back(fmt::format("{} cores", profile.host.cores));
    why.push_back("cores set the CPU optimizer's speed under offload");
    flags.push_back(fmt::format("--host-cores {}", local.cores));
  }
  auto join = [](const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
    return out;
  };
  return fmt::format(
      "this machine has {}, but the profile {} assumes {} (the host it was measured on; {}); if "
      "you will train on this machine, pass {}",
      join(have, " and "), profile.name, join(assumed, " and "), join(why, ", "), join(flags, " "));
}

}  // namespace dsplan

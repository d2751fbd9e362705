#include "tests/fuzz/fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/hardware_profile.h"
#include "core/hf_config.h"
#include "core/model_catalog.h"
#include "core/model_spec.h"
#include "core/status.h"
#include "planner/ds_config.h"
#include "simulator/workload.h"

namespace dsplan::fuzz {
namespace {

// The longest error message a reader may produce: user values are quoted cut (core/text.h), so
// a message never carries a whole input.
constexpr size_t kMaxMessage = 2000;

#ifdef DSPLAN_FUZZ_LIBFUZZER
constexpr bool kReplay = false;
#else
constexpr bool kReplay = true;
#endif

}  // namespace

void CheckMessage(const Status& s, const char* target) {
  if (s.ok()) return;
  const std::string& m = s.message();
  bool bad = m.empty() || m.size() > kMaxMessage;
  for (unsigned char c : m) bad = bad || c < 0x20 || c == 0x7f;
  if (bad) {
    std::fprintf(stderr, "fuzz %s: message breaks the one-line rule (%zu bytes): %.300s\n",
                 target, m.size(), m.c_str());
    std::abort();
  }
}

namespace {

std::string Text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A model that read cleanly is also counted and traced at a small shape, as `dsplan model` does.
void UseSpec(const Result<ModelSpec>& spec, const char* target) {
  CheckMessage(spec.status(), target);
  if (!spec.ok()) return;
  // Tracing is linear in layers x width; the readers are the target, so large valid models are
  // read and checked but not traced (the replay in ctest traces every corpus model).
  if (!kReplay && (spec->num_layers + spec->num_decoder_layers > 48 || spec->hidden_size > 8192)) {
    return;
  }
  auto n = CountParameters(*spec);
  CheckMessage(n.status(), target);
  if (n.ok() && *n < 0) {
    std::fprintf(stderr, "fuzz %s: negative parameter count %lld\n", target,
                 static_cast<long long>(*n));
    std::abort();
  }
}

}  // namespace

int HfConfig(const uint8_t* data, size_t size) {
  auto cfg = dsplan::HfConfig::Parse(Text(data, size), "<fuzz>");
  CheckMessage(cfg.status(), "hf_config");
  if (cfg.ok()) UseSpec(ModelSpecFromHf(*cfg, "fuzz"), "hf_config");
  return 0;
}

int DsConfig(const uint8_t* data, size_t size) {
  DsConfigContext ctx;
  ctx.nodes = 1;
  ctx.gpus_per_node = 2;
  ctx.hidden_size = 64;
  ctx.shape.seq_len = 16;
  auto r = ParseDsConfigText(Text(data, size), ctx, "<fuzz>");
  CheckMessage(r.status(), "ds_config");
  if (r.ok()) {
    const Plan& p = r->plan;
    if (p.micro_batch < 1 || p.grad_accum < 1) {
      std::fprintf(stderr, "fuzz ds_config: accepted batch %lld x %lld\n",
                   static_cast<long long>(p.micro_batch), static_cast<long long>(p.grad_accum));
      std::abort();
    }
  }
  return 0;
}

int ProfileYaml(const uint8_t* data, size_t size) {
  auto p = ParseHardwareProfile(Text(data, size), "<fuzz>");
  CheckMessage(p.status(), "profile_yaml");
  if (p.ok()) (void)p->SourceSummary();
  return 0;
}

int CatalogYaml(const uint8_t* data, size_t size) {
  auto cfg = ParseCatalogConfig(Text(data, size), "<fuzz>");
  CheckMessage(cfg.status(), "catalog_yaml");
  if (cfg.ok()) UseSpec(ModelSpecFromHf(*cfg, "fuzz"), "catalog_yaml");
  return 0;
}

}  // namespace dsplan::fuzz

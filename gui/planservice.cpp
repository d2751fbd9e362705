// SPDX-License-Identifier: Apache-2.0
#include "planservice.h"

#include <QFutureWatcher>

#include <algorithm>
#include <QPointer>
#include <QtConcurrent/QtConcurrentRun>

#include <fmt/format.h>

#include "core/units.h"
#include "planner/check.h"
#include "planner/ds_config.h"
#include "simulator/workload.h"

namespace dsplan::gui {
namespace {

template <typename T>
struct Outcome {
  std::optional<T> value;
  QString error;
};

QString q(const std::string& s) { return QString::fromStdString(s); }

// Runs |fn| on |pool| and calls |done| with its result on |ctx|'s thread.
template <typename T, typename Fn, typename Done>
void runAsync(QObject* ctx, QThreadPool* pool, Fn fn, Done done) {
  auto* watcher = new QFutureWatcher<T>(ctx);
  QObject::connect(watcher, &QFutureWatcher<T>::finished, ctx, [watcher, done] {
    done(watcher->result());
    watcher->deleteLater();
  });
  watcher->setFuture(QtConcurrent::run(pool, std::move(fn)));
}

}  // namespace

PlanService::PlanService(QObject* parent) : QObject(parent) {
  qRegisterMetaType<dsplan::PlanReport>("dsplan::PlanReport");
  qRegisterMetaType<dsplan::StepDetail>("dsplan::StepDetail");
  m_pool.setMaxThreadCount(2);
  auto cat = ListCatalog(DataDir());
  if (cat.ok()) {
    m_catalog = *cat;
  } else {
    m_catalogError = q(cat.status().message());
  }
  auto profiles = ListHardwareProfiles(DataDir());
  if (profiles.ok()) {
    for (const std::string& n : *profiles) m_profiles << q(n);
  }
}

PlanService::~PlanService() {
  if (m_planCancel) m_planCancel->store(true);
  m_pool.waitForDone();
}

QString PlanService::defaultProfile() const {
  return m_profiles.contains(QStringLiteral("h200-measured")) ? QStringLiteral("h200-measured")
                                                              : QStringLiteral("h200-sxm");
}

Result<ModelSpec> PlanService::resolveModel(const QString& text) const {
  const std::string t = text.trimmed().toStdString();
  if (t.empty()) {
    return Status::InvalidArgument(
        "model: empty; type a catalog name (e.g. t5-3b), the HF hub id of a catalog model, or "
        "open a config.json");
  }
  for (const CatalogEntry& e : m_catalog) {
    if (e.hf_id == t) return LoadModel(e.name, DataDir());
  }
  return LoadModel(t, DataDir());
}

void PlanService::started() {
  if (m_running++ == 0) emit busyChanged(true);
}

void PlanService::finished() {
  if (--m_running == 0) emit busyChanged(false);
}

void PlanService::requestPlan(const PlanInputs& in) {
  const int gen = ++m_planGen;
  // The older search, if still running, stops before its next family (its result would be
  // dropped anyway) and frees the pool for this one.
  const bool cancelledOlder = m_searchesRunning > 0 && m_planCancel;
  if (m_planCancel) m_planCancel->store(true);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  m_planCancel = cancel;
  ++m_searchesRunning;
  started();
  emit planStarted(cancelledOlder);
  struct PlanJob {
    PlanReport report;
    std::shared_ptr<const ModelSpec> spec;
    std::shared_ptr<const HardwareProfile> profile;
    PlannerRequest request;
  };
  QPointer<PlanService> self(this);
  auto job = [this, in, gen, self, cancel]() -> Outcome<PlanJob> {
    Outcome<PlanJob> out;
    auto spec = resolveModel(in.model);
    if (!spec.ok()) {
      out.error = q(spec.status().message());
      return out;
    }
    const std::string pname =
        in.profile.isEmpty() ? defaultProfile().toStdString() : in.profile.toStdString();
    auto profile = FindHardwareProfile(pname, DataDir());
    if (!profile.ok()) {
      out.error = q(profile.status().message());
      return out;
    }
    PlanJob j;
    j.spec = std::make_shared<const ModelSpec>(std::move(*spec));
    j.profile = std::make_shared<const HardwareProfile>(std::move(*profile));
    PlannerRequest& r = j.request;
    r.spec = *j.spec;
    r.nodes = in.nodes;
    r.gpus_per_node = in.gpusPerNode;
    r.profile = j.profile.get();
    ResolveRunLengths(*j.spec,
                      in.seqLen > 0 ? std::optional<int64_t>(in.seqLen) : std::nullopt,
                      in.targetLen > 0 && j.spec->encoder_decoder()
                          ? std::optional<int64_t>(in.targetLen)
                          : std::nullopt,
                      &r.shape);
    if (in.globalBatch > 0) r.global_batch = in.globalBatch;
    if (!in.precision.isEmpty()) {
      auto p = ParsePrecision(in.precision.toStdString());
      if (!p.ok()) {
        out.error = q(p.status().message());
        return out;
      }
      r.PinPrecision(*p);
    }
    if (in.stage >= 0) r.stage = in.stage;
    if (in.microBatch > 0) r.PinMicroBatch(in.microBatch);
    if (in.checkpointing >= 0) r.PinGradientCheckpointing(in.checkpointing == 1);
    r.no_offload = in.noOffload;
    r.zero_init = !in.noZeroInit;
    r.host_memory_bytes = in.hostMemoryBytes;
    r.nvme_bytes = in.nvmeBytes;
    // --max-gpu-memory-fraction F is --headroom (1 - F), as on the command line.
    if (in.maxGpuMemoryFraction < 1.0) r.headroom.fraction = 1.0 - in.maxGpuMemoryFraction;
    auto obj = ParseObjective(in.objective.toStdString());
    if (!obj.ok()) {
      out.error = q(obj.status().message());
      return out;
    }
    r.objective = *obj;
    r.threads = 2;
    r.cancel = cancel.get();
    r.progress = [self, gen](double f) {
      // Queued to the GUI thread; the service outlives its pool's jobs (destructor waits).
      QMetaObject::invokeMethod(
          self.data(),
          [self, gen, f] {
            if (self && gen == self->m_planGen) emit self->planProgress(f);
          },
          Qt::QueuedConnection);
    };
    auto report = BuildPlanReport(r);
    r.progress = nullptr;
    r.cancel = nullptr;
    if (!report.ok()) {
      out.error = q(report.status().message());
      return out;
    }
    j.report = std::move(*report);
    out.value = std::move(j);
    return out;
  };
  runAsync<Outcome<PlanJob>>(this, &m_pool, std::move(job), [this, gen, cancel](const Outcome<PlanJob>& o) {
    --m_searchesRunning;
    if (!o.value && cancel->load() && o.error == QLatin1String(kCancelledMessage)) {
      ++m_cancelledSearches;
    }
    finished();
    if (gen != m_planGen) return;  // superseded
    if (!o.value) {
      emit planFailed(o.error);
      return;
    }
    m_spec = o.value->spec;
    m_profile = o.value->profile;
    m_request = o.value->request;
    m_request.profile = m_profile.get();
    m_request.spec = *m_spec;
    emit planReady(o.value->report);
  });
}

namespace {

SimulateOptions OptionsFor(const PlannerRequest& r) {
  SimulateOptions o;
  o.headroom = r.headroom;
  o.host_memory_bytes = r.host_memory_bytes;
  o.nvme_bytes = r.nvme_bytes;
  return o;
}

}  // namespace

void PlanService::requestDetail(const Plan& plan) {
  if (!m_spec || !m_profile) return;
  const int gen = ++m_detailGen;
  started();
  auto spec = m_spec;
  auto profile = m_profile;
  const SimulateOptions o = OptionsFor(m_request);
  auto job = [spec, profile, plan, o]() -> Outcome<StepDetail> {
    Outcome<StepDetail> out;
    auto d = SimulateStepDetail(*spec, *profile, plan, o);
    if (d.ok()) {
      out.value = std::move(*d);
    } else {
      out.error = q(d.status().message());
    }
    return out;
  };
  runAsync<Outcome<StepDetail>>(this, &m_pool, std::move(job), [this, gen](const Outcome<StepDetail>& o) {
    finished();
    if (gen != m_detailGen) return;
    if (o.value) {
      emit detailReady(*o.value);
    } else {
      emit detailFailed(o.error);
    }
  });
}

void PlanService::requestWhatIf(const Plan& plan) {
  if (!m_spec || !m_profile) return;
  const int gen = ++m_whatIfGen;
  started();
  auto spec = m_spec;
  auto profile = m_profile;
  const SimulateOptions o = OptionsFor(m_request);
  auto job = [spec, profile, plan, o]() -> WhatIfResult {
    WhatIfResult r;
    r.plan = plan;
    Status valid = ValidatePlan(plan);
    if (!valid.ok()) {
      r.error = q(valid.message());
      return r;
    }
    auto d = SimulateStepDetail(*spec, *profile, plan, o);
    if (!d.ok()) {
      r.error = q(d.status().message());
      return r;
    }
    r.detail = std::move(*d);
    // The largest micro-batch that fits with everything else unchanged: doubling, then
    // bisection (every memory term grows with the micro-batch), as the planner searches.
    Simulator sim(*spec, *profile);
    auto fits = [&](int64_t mb) {
      Plan p = plan;
      p.micro_batch = mb;
      auto pred = sim.Simulate(p, o);
      return pred.ok() && pred->fits;
    };
    constexpr int64_t kMax = 4096;
    int64_t lo = 0, hi = 0;  // lo fits (0: none), hi does not (0: unknown)
    for (int64_t mb = 1; mb <= kMax; mb *= 2) {
      if (fits(mb)) {
        lo = mb;
      } else {
        hi = mb;
        break;
      }
    }
    if (hi == 0) hi = kMax + 1;
    while (lo > 0 && hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    r.largestFittingMicroBatch = lo;
    return r;
  };
  runAsync<WhatIfResult>(this, &m_pool, std::move(job), [this, gen](const WhatIfResult& r) {
    finished();
    if (gen != m_whatIfGen) return;
    emit whatIfReady(r);
  });
}

void PlanService::requestCheck(const QString& text, const QString& sourceName) {
  if (!m_spec || !m_profile) {
    emit checkFailed(tr("Plan a model first: the check uses its model, cluster and lengths."));
    return;
  }
  const int gen = ++m_checkGen;
  started();
  auto spec = m_spec;
  auto profile = m_profile;
  const PlannerRequest req = m_request;
  auto job = [spec, profile, req, text, sourceName]() -> Outcome<CheckResult> {
    Outcome<CheckResult> out;
    DsConfigContext ctx;
    ctx.nodes = req.nodes;
    ctx.gpus_per_node = req.gpus_per_node;
    ctx.hidden_size = spec->hidden_size;
    // The request's lengths and attention, and its pinned precision for "auto"; the
    // micro-batch comes from the config alone and checkpointing stays off, as before.
    ctx.shape.seq_len = req.shape.seq_len;
    ctx.shape.target_len = req.shape.target_len;
    ctx.shape.attention = req.shape.attention;
    if (const auto p = req.PinnedPrecision()) ctx.PinPrecision(*p);
    auto parsed = ParseDsConfigText(text.toStdString(), ctx, sourceName.toStdString());
    if (!parsed.ok()) {
      out.error = q(parsed.status().message());
      return out;
    }
    auto d = SimulateStepDetail(*spec, *profile, parsed->plan, SimulateOptions{});
    if (!d.ok()) {
      out.error = q(d.status().message());
      return out;
    }
    CheckResult c;
    c.source = sourceName;
    for (const std::string& w : parsed->warnings) c.warnings << q(w);
    for (const std::string& w : d->prediction.warnings) c.warnings << q(w);
    for (const std::string& w : CheckPlan(parsed->plan, d->prediction, *profile)) c.warnings << q(w);
    // What dsplan would pick for the same model, cluster, lengths and global batch (the search
    // `dsplan check` runs).
    const Plan& plan = parsed->plan;
    const Prediction& pred = d->prediction;
    PlannerRequest r;
    r.spec = *spec;
    r.nodes = plan.nodes;
    r.gpus_per_node = plan.gpus_per_node;
    r.profile = profile.get();
    // The config's lengths, attention and precision; the micro-batch and checkpointing are the
    // search's to choose.
    r.shape = plan.shape();
    r.PinPrecision(plan.precision);
    r.global_batch = plan.train_batch();
    if (plan.zero.offload_optimizer.device == OffloadDevice::kNvme ||
        plan.zero.offload_param.device == OffloadDevice::kNvme) {
      r.nvme_bytes = std::max<int64_t>(pred.nvme_bytes_per_node, 1);
      r.nvme_path = plan.zero.offload_optimizer.nvme_path.empty()
                        ? plan.zero.offload_param.nvme_path
                        : plan.zero.offload_optimizer.nvme_path;
    }
    auto better = RunPlanner(r);
    if (better.ok() && !better->ranked.empty()) {
      c.alternative = better->ranked.front();
      c.speedup = pred.fits && pred.tokens_per_s > 0
                      ? c.alternative->prediction.tokens_per_s / pred.tokens_per_s
                      : 0;
    } else if (!better.ok()) {
      c.warnings << QStringLiteral("the search for a better plan failed: %1")
                        .arg(q(better.status().message()));
    }
    c.detail = std::move(*d);
    out.value = std::move(c);
    return out;
  };
  runAsync<Outcome<CheckResult>>(this, &m_pool, std::move(job), [this, gen](const Outcome<CheckResult>& o) {
    finished();
    if (gen != m_checkGen) return;
    if (o.value) {
      emit checkReady(*o.value);
    } else {
      emit checkFailed(o.error);
    }
  });
}

}  // namespace dsplan::gui

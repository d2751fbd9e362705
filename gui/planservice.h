// SPDX-License-Identifier: Apache-2.0
// PlanService: runs the planner and the simulator off the GUI thread (QtConcurrent) and
// publishes their results as values through signals, like hotspot's PerfParser. Each kind of
// request has a generation counter: a newer request supersedes an older one, whose result is
// dropped when it arrives. A running search is also cancelled (PlannerRequest::cancel): it
// stops before its next family and frees its thread for the new one.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <QThreadPool>

#include <atomic>
#include <memory>
#include <optional>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "core/model_spec.h"
#include "planner/report.h"

namespace dsplan::gui {

/// What the inputs panel asks for; 0 / -1 / empty mean "default" or "searched".
struct PlanInputs {
  QString model;                 // catalog name, HF hub id of a catalog entry, or a path
  QString profile;               // profile name or YAML path; empty = the default
  int nodes = 1;
  int gpusPerNode = 4;
  qint64 seqLen = 0;             // 0: the CLI's default for the model
  qint64 targetLen = 0;          // 0: the default (T5: 128)
  qint64 globalBatch = 0;        // 0: not pinned
  QString precision;             // "", "bf16", "fp16", "fp32"
  int stage = -1;                // -1: searched
  qint64 microBatch = 0;         // 0: searched
  int checkpointing = -1;        // -1 searched, 0 off, 1 on
  bool noOffload = false;
  bool noZeroInit = false;       // the model is built outside deepspeed.zero.Init (--no-zero-init)
  qint64 hostMemoryBytes = 0;    // 0: the profile's
  qint64 nvmeBytes = 0;          // 0: no NVMe offload
  double maxGpuMemoryFraction = 1.0;
  QString objective = QStringLiteral("throughput");
};

struct WhatIfResult {
  Plan plan;
  std::optional<StepDetail> detail;   // empty when the plan is invalid (error says why)
  QString error;
  qint64 largestFittingMicroBatch = 0;  // with everything else as in |plan|; 0: none fits
};

struct CheckResult {
  QString source;
  std::optional<StepDetail> detail;
  QStringList warnings;               // the reader's warnings and CheckPlan's findings
  /// What dsplan would pick at the same global batch (as `dsplan check`), when anything fits.
  std::optional<ScoredPlan> alternative;
  double speedup = 0;                 // alternative / checked tokens/s; 0 when the config does not fit
};

class PlanService : public QObject {
  Q_OBJECT
 public:
  explicit PlanService(QObject* parent = nullptr);
  /// Cancels a running search and waits for running jobs.
  ~PlanService() override;

  /// The catalog (name, hf id); empty with catalogError() set when it cannot be read.
  const std::vector<CatalogEntry>& catalog() const { return m_catalog; }
  QString catalogError() const { return m_catalogError; }
  QStringList profileNames() const { return m_profiles; }
  QString defaultProfile() const;

  void requestPlan(const PlanInputs& inputs);
  void requestDetail(const Plan& plan);
  void requestWhatIf(const Plan& plan);
  void requestCheck(const QString& text, const QString& sourceName);

  /// The model and profile of the last successful plan request (null before).
  std::shared_ptr<const ModelSpec> spec() const { return m_spec; }
  std::shared_ptr<const HardwareProfile> profile() const { return m_profile; }
  bool busy() const { return m_running > 0; }
  /// Searches stopped through their cancel flag because a newer request came (they ended with
  /// kCancelledMessage rather than running to the end).
  int cancelledSearches() const { return m_cancelledSearches; }

  /// Resolves the model field: a catalog entry's HF id maps to its name; anything else goes to
  /// LoadModel (catalog name, config.json or a folder holding one).
  Result<ModelSpec> resolveModel(const QString& text) const;

 signals:
  /// |cancelledOlder|: a search still running was told to stop for this one.
  void planStarted(bool cancelledOlder);
  void planProgress(double fraction);
  void planReady(const dsplan::PlanReport& report);
  void planFailed(const QString& message);
  void detailReady(const dsplan::StepDetail& detail);
  void detailFailed(const QString& message);
  void whatIfReady(const dsplan::gui::WhatIfResult& result);
  void checkReady(const dsplan::gui::CheckResult& result);
  void checkFailed(const QString& message);
  void busyChanged(bool busy);

 private:
  void started();
  void finished();

  std::vector<CatalogEntry> m_catalog;
  QString m_catalogError;
  QStringList m_profiles;
  std::shared_ptr<const ModelSpec> m_spec;
  std::shared_ptr<const HardwareProfile> m_profile;
  PlannerRequest m_request;      // the last successful request (spec and profile above)
  int m_planGen = 0, m_detailGen = 0, m_whatIfGen = 0, m_checkGen = 0;
  int m_running = 0;
  int m_cancelledSearches = 0;
  int m_searchesRunning = 0;
  std::shared_ptr<std::atomic<bool>> m_planCancel;  // the newest search's flag
  QThreadPool m_pool;
};

}  // namespace dsplan::gui

Q_DECLARE_METATYPE(dsplan::gui::CheckResult)
Q_DECLARE_METATYPE(dsplan::gui::WhatIfResult)

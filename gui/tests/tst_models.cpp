// SPDX-License-Identifier: Apache-2.0
// The item models over the planner's and simulator's values: Qt's model invariants
// (QAbstractItemModelTester) and what each row says, against the values they were built from.
#include <QAbstractItemModelTester>
#include <QColor>
#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QtTest>

#include <nlohmann/json.hpp>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "models/memorybreakdownmodel.h"
#include "models/memorycomparemodel.h"
#include "models/validationmodel.h"
#include "models/planstablemodel.h"
#include "models/timelinemodel.h"
#include "planner/report.h"
#include "simulator/workload.h"

using namespace dsplan;
using namespace dsplan::gui;

class TestModels : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void plansTable();
  void plansTableRejectedRows();
  void plansFilterProxy();
  void memoryBreakdown();
  void timeline();
  void stageFoldingAndTimeBand();
  void memoryCompare();
  void validationReport();
  void validationReportErrors();
  void everyRealValidationReportLoads();
  void plannerStopsWhenCancelled();

 private:
  HardwareProfile m_profile;
  ModelSpec m_spec;
  PlanReport m_report;   // t5-3b on 4 GPUs, a GPU limited to 20 %: stage 0 cannot fit
  StepDetail m_detail;   // the best plan's
};

void TestModels::initTestCase() {
  auto profile = FindHardwareProfile("h200-sxm", DataDir());
  QVERIFY2(profile.ok(), profile.status().message().c_str());
  m_profile = *profile;
  auto spec = LoadModel("t5-3b", DataDir());
  QVERIFY2(spec.ok(), spec.status().message().c_str());
  m_spec = *spec;
  PlannerRequest r;
  r.spec = m_spec;
  r.gpus_per_node = 4;
  r.profile = &m_profile;
  ResolveRunLengths(m_spec, std::nullopt, std::nullopt, &r.shape);
  r.headroom.fraction = 0.8;  // use a fifth of the GPU
  auto report = BuildPlanReport(r);
  QVERIFY2(report.ok(), report.status().message().c_str());
  m_report = *report;
  QVERIFY(!m_report.recommendations.empty());
  SimulateOptions o;
  o.headroom.fraction = 0.8;
  auto d = SimulateStepDetail(m_spec, m_profile, m_report.recommendations.front().plan, o);
  QVERIFY2(d.ok(), d.status().message().c_str());
  m_detail = *d;
}

void TestModels::plansTable() {
  PlansTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  model.setReport(m_report);
  QVERIFY(model.rowCount() >= static_cast<int>(m_report.recommendations.size()));
  // The first rows are the recommendations in order, with the planner's numbers.
  for (int i = 0; i < static_cast<int>(m_report.recommendations.size()); ++i) {
    const ScoredPlan& s = m_report.recommendations[i];
    QCOMPARE(model.index(i, 0).data(PlansTableModel::PlanIndexRole).toInt(), i);
    QVERIFY(model.index(i, 0).data(PlansTableModel::FitsRole).toBool());
    // dsplan's "peak GPU": reserved + context + NCCL.
    QCOMPARE(model.index(i, PlansTableModel::kPeak).data(PlansTableModel::SortRole).toLongLong(),
             s.prediction.gpu_total_bytes + s.prediction.gpu_nccl_bytes);
    QCOMPARE(model.index(i, PlansTableModel::kTokensPerSecond).data(PlansTableModel::SortRole).toDouble(),
             s.prediction.tokens_per_s);
    QCOMPARE(model.index(i, PlansTableModel::kStage).data(PlansTableModel::SortRole).toInt(),
             s.plan.zero.stage);
    QCOMPARE(model.index(i, PlansTableModel::kBatch).data().toString(),
             QStringLiteral("%1 × %2 = %3").arg(s.plan.micro_batch).arg(s.plan.grad_accum).arg(s.plan.train_batch()));
  }
  QCOMPARE(model.plan(0)->prediction.tokens_per_s, m_report.recommendations[0].prediction.tokens_per_s);
  QVERIFY(model.plan(-1) == nullptr);
  model.setReport(PlanReport{});
  QCOMPARE(model.rowCount(), 0);
}

void TestModels::plansTableRejectedRows() {
  PlansTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  model.setReport(m_report);
  int rejected = 0;
  for (int r = 0; r < model.rowCount(); ++r) {
    const QModelIndex i = model.index(r, PlansTableModel::kNote);
    if (i.data(PlansTableModel::FitsRole).toBool()) continue;
    ++rejected;
    QCOMPARE(i.data(PlansTableModel::PlanIndexRole).toInt(), -1);
    QVERIFY(i.data().toString().startsWith(QStringLiteral("does not fit: ")));
    QCOMPARE(i.data(Qt::ForegroundRole).value<QColor>(), QColor(140, 140, 140));
  }
  int expected = 0;
  for (const RejectedFamily& f : m_report.rejected) {
    expected += f.best_tokens_per_s == 0;
  }
  QCOMPARE(rejected, expected);
  // At 20 % of an H200 (28 GB), stage 0 cannot hold t5-3b's 16 bytes per parameter.
  QVERIFY(expected > 0);
}

void TestModels::plansFilterProxy() {
  PlansTableModel model;
  model.setReport(m_report);
  PlansFilterProxy proxy;
  proxy.setSourceModel(&model);
  QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(proxy.rowCount(), model.rowCount());
  proxy.setShowRejected(false);
  QCOMPARE(proxy.rowCount(), static_cast<int>(m_report.recommendations.size()));
  proxy.setShowRejected(true);
  // Sorting by tokens/s, descending: the planner's throughput order.
  proxy.sort(PlansTableModel::kTokensPerSecond, Qt::DescendingOrder);
  double last = 1e300;
  for (int r = 0; r < proxy.rowCount(); ++r) {
    const QModelIndex i = proxy.index(r, PlansTableModel::kTokensPerSecond);
    if (!i.data(PlansTableModel::FitsRole).toBool()) continue;
    const double t = i.data(PlansTableModel::SortRole).toDouble();
    QVERIFY(t <= last);
    last = t;
  }
  proxy.setFilterFixedString(QStringLiteral("opt→cpu"));
  for (int r = 0; r < proxy.rowCount(); ++r) {
    bool any = false;
    for (int c = 0; c < proxy.columnCount(); ++c) {
      any = any || proxy.index(r, c).data().toString().contains(QStringLiteral("opt→cpu"));
    }
    QVERIFY(any);
  }
}

void TestModels::memoryBreakdown() {
  MemoryBreakdownModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(model.rowCount(), 0);
  const Prediction& p = m_detail.prediction;
  model.setPrediction(p);
  QCOMPARE(model.rowCount(), kNumMemCategories);
  for (int c = 0; c < kNumMemCategories; ++c) {
    QCOMPARE(model.index(c, MemoryBreakdownModel::kBytes).data(MemoryBreakdownModel::SortRole).toLongLong(),
             p.gpu_breakdown_at_peak[c]);
    QCOMPARE(model.index(c, 0).data().toString(),
             QString::fromUtf8(MemCategoryName(static_cast<MemCategory>(c))));
  }
  // The categories at the peak add up to the predicted peak (reserved + context).
  QCOMPARE(model.totalBytes(), p.gpu_total_bytes);
  model.clear();
  QCOMPARE(model.rowCount(), 0);
}

void TestModels::timeline() {
  TimelineModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  model.setTasks(m_detail.tasks);
  QCOMPARE(model.rowCount(), static_cast<int>(m_detail.tasks.size()));
  QVERIFY(model.rowCount() > 10);
  double makespan = 0;
  for (int r = 0; r < model.rowCount(); ++r) {
    const TimelineTask& t = m_detail.tasks[static_cast<size_t>(r)];
    QCOMPARE(model.index(r, TimelineModel::kName).data().toString(), QString::fromStdString(t.name));
    QCOMPARE(model.index(r, TimelineModel::kDuration).data(TimelineModel::SortRole).toDouble(),
             t.end_s - t.start_s);
    QVERIFY(t.end_s >= t.start_s);
    makespan = std::max(makespan, t.end_s);
  }
  // The schedule's last task ends at the step time the prediction reports.
  QVERIFY(std::abs(makespan - m_detail.prediction.step_time_s) <= 1e-9 * std::max(1.0, makespan));
}

void TestModels::stageFoldingAndTimeBand() {
  // t5-3b on 4 H200s at the default headroom: the CLI prints stage "1=2" for this request
  // (stage 1 and 2 give the same plan); the table folds them the same way.
  PlannerRequest r;
  r.spec = m_spec;
  r.gpus_per_node = 4;
  r.profile = &m_profile;
  ResolveRunLengths(m_spec, std::nullopt, std::nullopt, &r.shape);
  auto report = BuildPlanReport(r);
  QVERIFY2(report.ok(), report.status().message().c_str());
  PlansTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  model.setReport(*report);
  int folded = 0;
  for (int i = 0; i < static_cast<int>(report->recommendations.size()); ++i) {
    const ScoredPlan& s = report->recommendations[static_cast<size_t>(i)];
    QString expected = QString::number(s.plan.zero.stage);
    for (int o : s.same_as_stages) expected += QLatin1Char('=') + QString::number(o);
    QCOMPARE(model.index(i, PlansTableModel::kStage).data().toString(), expected);
    folded += !s.same_as_stages.empty();
    // No other row shows a stage folded into this one with the same choice.
    for (int o : s.same_as_stages) {
      for (const ScoredPlan& t : report->recommendations) {
        const bool sameChoice = t.plan.zero.stage == o &&
                                t.plan.gradient_checkpointing == s.plan.gradient_checkpointing &&
                                t.plan.zero.offload_optimizer.device == s.plan.zero.offload_optimizer.device &&
                                t.plan.zero.offload_param.device == s.plan.zero.offload_param.device;
        QVERIFY(!sameChoice);
      }
    }
    // Step time with its band: "<t> <unit> (<low>–<high>)", the ends low x and high x the time.
    const QString text = model.index(i, PlansTableModel::kStepTime).data().toString();
    static const QRegularExpression re(QStringLiteral("^([0-9.]+) (s|ms|µs) \\(([0-9.]+)–([0-9.]+)\\)$"));
    const QRegularExpressionMatch m = re.match(text);
    QVERIFY2(m.hasMatch(), qPrintable(text));
    const double t = m.captured(1).toDouble();
    const double lo = m.captured(3).toDouble();
    const double hi = m.captured(4).toDouble();
    const TimeBand& band = s.prediction.time_band;
    QVERIFY(band.low < 1 && band.high > 1);
    QVERIFY2(std::abs(lo / t - band.low) < 0.01 && std::abs(hi / t - band.high) < 0.01, qPrintable(text));
    QCOMPARE(model.index(i, PlansTableModel::kStepTime).data(PlansTableModel::SortRole).toDouble(),
             s.prediction.step_time_s);
  }
  QVERIFY2(folded > 0, "expected a folded stage 1=2 row for t5-3b on 4 H200s (as dsplan prints)");
}

void TestModels::memoryCompare() {
  MemoryCompareModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(model.rowCount(), 0);
  QVERIFY(m_report.recommendations.size() >= 2);
  const Prediction& a = m_report.recommendations[0].prediction;
  const Prediction& b = m_report.recommendations[1].prediction;
  model.setPlans(a, QStringLiteral("A"), b, QStringLiteral("B"));
  QCOMPARE(model.rowCount(), kNumMemCategories + 1);
  int64_t sumA = 0, sumB = 0;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const qlonglong va = model.index(c, MemoryCompareModel::kA).data(MemoryCompareModel::SortRole).toLongLong();
    const qlonglong vb = model.index(c, MemoryCompareModel::kB).data(MemoryCompareModel::SortRole).toLongLong();
    QCOMPARE(va, a.gpu_breakdown_at_peak[c]);
    QCOMPARE(vb, b.gpu_breakdown_at_peak[c]);
    QCOMPARE(model.index(c, MemoryCompareModel::kDifference).data(MemoryCompareModel::SortRole).toLongLong(),
             vb - va);
    sumA += va;
    sumB += vb;
  }
  // The total row is each plan's predicted peak, and the categories add up to it.
  const int total = MemoryCompareModel::kTotalRow;
  QCOMPARE(model.index(total, MemoryCompareModel::kA).data(MemoryCompareModel::SortRole).toLongLong(),
           a.gpu_total_bytes);
  QCOMPARE(model.index(total, MemoryCompareModel::kB).data(MemoryCompareModel::SortRole).toLongLong(),
           b.gpu_total_bytes);
  QCOMPARE(sumA, a.gpu_total_bytes);
  QCOMPARE(sumB, b.gpu_total_bytes);
  model.clear();
  QCOMPARE(model.rowCount(), 0);
}

void TestModels::validationReport() {
  // A real `dsplan validate --json` report (one H200, docs/validation/h200/README.md), read
  // both by the loader and here, by nlohmann, to compare.
  const QString path = QString::fromUtf8(qgetenv("DSPLAN_DATA_DIR")) +
                       QStringLiteral("/docs/validation/h200/t5-3b_s3_mb8_gc.json");
  auto d = LoadValidationReport(path);
  QVERIFY2(d.ok(), d.status().message().c_str());
  QFile f(path);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const nlohmann::json j = nlohmann::json::parse(f.readAll().toStdString());
  QCOMPARE(d->pass, j["pass"].get<bool>());
  QCOMPARE(d->verdict.toStdString(), j["verdict"].get<std::string>());
  QCOMPARE(d->model.toStdString(), j["model"].get<std::string>());
  QCOMPARE(d->stepSeconds.size(), static_cast<qsizetype>(j["step_s"].size()));
  ValidationRowsModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  model.setValidation(*d);
  QCOMPARE(model.rowCount(), static_cast<int>(j["rows"].size()));
  for (int r = 0; r < model.rowCount(); ++r) {
    const nlohmann::json& row = j["rows"][static_cast<size_t>(r)];
    QCOMPARE(model.index(r, ValidationRowsModel::kQuantity).data().toString().toStdString(),
             row["quantity"].get<std::string>());
    QCOMPARE(model.index(r, ValidationRowsModel::kPredicted).data(ValidationRowsModel::SortRole).toDouble(),
             row["predicted"].get<double>());
    QCOMPARE(model.index(r, ValidationRowsModel::kMeasured).data(ValidationRowsModel::SortRole).toDouble(),
             row["measured"].get<double>());
    QCOMPARE(model.index(r, 0).data(ValidationRowsModel::BytesRole).toBool(),
             row["unit"].get<std::string>() == "bytes");
  }
  model.clear();
  QCOMPARE(model.rowCount(), 0);
}

void TestModels::validationReportErrors() {
  auto err = [](const std::string& text) {
    auto d = ParseValidationReport(text, QStringLiteral("report.json"));
    return d.ok() ? QString() : QString::fromStdString(d.status().message());
  };
  const std::string good =
      R"({"pass": true, "verdict": "PASS", "out_of_memory": false, "step_s": [0.1],
          "device": {"name": "H200", "world_size": 1},
          "rows": [{"quantity": "step time", "unit": "s", "predicted": 0.1, "measured": 0.1,
                    "error": 0.0, "judged": true}]})";
  QCOMPARE(err(good), QString());
  // Each message names the file and the key.
  QString e = err(R"({"schema": "dsplan/plan", "recommendations": []})");
  QVERIFY2(e.contains(QStringLiteral("report.json")) && e.contains(QStringLiteral("dsplan/plan")), qPrintable(e));
  e = err(R"({"losses": [1.0], "pass": true})");
  QVERIFY2(e.contains(QStringLiteral("--executor host")) && e.contains(QStringLiteral("losses")), qPrintable(e));
  std::string bad = good;
  bad.replace(bad.find(R"("measured": 0.1)"), 15, R"("measured": "x")");
  e = err(bad);
  QVERIFY2(e.contains(QStringLiteral("report.json")) && e.contains(QStringLiteral("rows[0].measured")), qPrintable(e));
  std::string noRows = good.substr(0, good.find(R"(,
          "rows")")) + "}";
  e = err(noRows);
  QVERIFY2(e.contains(QStringLiteral("'rows'")) && e.contains(QStringLiteral("missing")), qPrintable(e));
  e = err("{\"pass\": tru");
  QVERIFY2(e.contains(QStringLiteral("report.json:1:")), qPrintable(e));
  e = err("[1, 2]");
  QVERIFY2(e.contains(QStringLiteral("report.json")), qPrintable(e));
}

void TestModels::everyRealValidationReportLoads() {
  // Every `dsplan validate --json` report of the H200 runs in docs/validation/h200 reads back
  // with all its rows, the out-of-memory one with its OOM line and no rows.
  const QDir dir(QString::fromUtf8(qgetenv("DSPLAN_DATA_DIR")) + QStringLiteral("/docs/validation/h200"));
  const QStringList files = dir.entryList({QStringLiteral("*.json")}, QDir::Files);
  QVERIFY(files.size() >= 10);
  int oom = 0;
  for (const QString& name : files) {
    const QString path = dir.filePath(name);
    auto d = LoadValidationReport(path);
    QVERIFY2(d.ok(), d.ok() ? "" : d.status().message().c_str());
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const nlohmann::json j = nlohmann::json::parse(f.readAll().toStdString());
    QCOMPARE(d->rows.size(), static_cast<qsizetype>(j["rows"].size()));
    QCOMPARE(d->outOfMemory, j["out_of_memory"].get<bool>());
    if (d->outOfMemory) {
      ++oom;
      QVERIFY(d->oom.startsWith(QStringLiteral("OOM")));
    }
  }
  QCOMPARE(oom, 1);
}

void TestModels::plannerStopsWhenCancelled() {
  // PlannerRequest::cancel (the GUI's cancellation): set before the search, the search returns
  // kCancelledMessage instead of a result; cleared, the same request runs to the end.
  PlannerRequest r;
  r.spec = m_spec;
  r.gpus_per_node = 4;
  r.profile = &m_profile;
  ResolveRunLengths(m_spec, std::nullopt, std::nullopt, &r.shape);
  std::atomic<bool> cancel{true};
  r.cancel = &cancel;
  auto stopped = RunPlanner(r);
  QVERIFY(!stopped.ok());
  QCOMPARE(stopped.status().message(), std::string(kCancelledMessage));
  cancel = false;
  auto full = RunPlanner(r);
  QVERIFY2(full.ok(), full.ok() ? "" : full.status().message().c_str());
  QVERIFY(!full->recommendations.empty());
}

QTEST_GUILESS_MAIN(TestModels)
#include "tst_models.moc"

// SPDX-License-Identifier: Apache-2.0
// The item models over the planner's and simulator's values: Qt's model invariants
// (QAbstractItemModelTester) and what each row says, against the values they were built from.
#include <QAbstractItemModelTester>
#include <QColor>
#include <QtTest>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "models/memorybreakdownmodel.h"
#include "models/planstablemodel.h"
#include "models/timelinemodel.h"
#include "planner/report.h"

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
  DefaultLengths(m_spec, &r.seq_len, &r.target_len);
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
    QCOMPARE(model.index(i, PlansTableModel::kPeak).data(PlansTableModel::SortRole).toLongLong(),
             s.prediction.gpu_total_bytes);
    QCOMPARE(model.index(i, PlansTableModel::kTokensPerSecond).data(PlansTableModel::SortRole).toDouble(),
             s.prediction.tokens_per_s);
    QCOMPARE(model.index(i, PlansTableModel::kStage).data().toInt(), s.plan.zero.stage);
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

QTEST_GUILESS_MAIN(TestModels)
#include "tst_models.moc"

// SPDX-License-Identifier: Apache-2.0
// Drives the main window offscreen: plans t5-3b on 4 H200s, selects the best plan, checks the
// memory bar against the simulator's own prediction, moves the what-if micro-batch slider past
// the fitting limit, and feeds bad inputs that must show up in the window.
// First: launcher.h names a field `slots`, which Qt's headers define as a macro.
#include "planner/launcher.h"
// clang-format off
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QProcess>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QHorizontalBarSeries>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QPushButton>
#include <QSignalSpy>
#include <QSlider>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "core/hardware_profile.h"
#include "core/model_catalog.h"
#include "inputspanel.h"
#include "mainwindow.h"
#include "memorybar.h"
#include "models/planstablemodel.h"
#include "models/memorybreakdownmodel.h"
#include "models/memorycomparemodel.h"
#include "models/validationmodel.h"
#include "pages.h"
#include "planner/ds_config.h"
#include "planner/report.h"
#include "timelinewidget.h"
// clang-format on

using namespace dsplan;
using namespace dsplan::gui;

class TestMainWindow : public QObject {
  Q_OBJECT

 private slots:
  void bestPlanBreakdownAndWhatIf();
  void badModelNameShowsInWindow();
  void brokenConfigJsonNamesFileAndKey();
  void exportWritesTheCliConfig();
  void unreadableProfileNamesFile();
  void newerRequestSupersedesOlder();
  void checkPastedConfig();
  void validationReportOverlay();
  void memoryTwoPlansSideBySide();
  void exportMatchesCliBytes();
  void newRequestCancelsRunningSearch();
  void exportHostfileForSeveralNodes();
  void modelBuiltOutsideZeroInitReachesThePlans();
};

namespace {
constexpr int kTimeoutMs = 120000;

void planT5(MainWindow& w) {
  w.inputs()->setModelText(QStringLiteral("t5-3b"));
  w.inputs()->setCluster(1, 4);
  w.plan();
}
}  // namespace

void TestMainWindow::bestPlanBreakdownAndWhatIf() {
  MainWindow w;
  w.show();
  QSignalSpy ready(w.service(), &PlanService::planReady);
  QSignalSpy detail(w.service(), &PlanService::detailReady);
  QSignalSpy whatIf(w.service(), &PlanService::whatIfReady);
  planT5(w);
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1, kTimeoutMs);
  QTRY_VERIFY_WITH_TIMEOUT(detail.count() >= 1, kTimeoutMs);
  QVERIFY(w.errorText().isEmpty());

  // The best plan is selected: the first recommendation, shown in the table's current row.
  const PlanReport& report = w.plansPage()->model()->report();
  QCOMPARE(report.model_name, std::string("t5-3b"));
  QCOMPARE(report.gpus_per_node, 4);
  QVERIFY(!report.recommendations.empty());
  QVERIFY(w.selectedPlan().has_value());
  QCOMPARE(w.selectedPlan()->plan, report.recommendations.front().plan);
  QCOMPARE(w.plansPage()->view()->currentIndex().siblingAtColumn(0).data(PlansTableModel::PlanIndexRole).toInt(), 0);

  // The bar's total equals the simulator's predicted peak for that plan, simulated here
  // independently of the window.
  auto profile = FindHardwareProfile(w.service()->defaultProfile().toStdString(), DataDir());
  QVERIFY2(profile.ok(), profile.status().message().c_str());
  auto spec = LoadModel("t5-3b", DataDir());
  QVERIFY2(spec.ok(), spec.status().message().c_str());
  auto sim = SimulateStepDetail(*spec, *profile, w.selectedPlan()->plan);
  QVERIFY2(sim.ok(), sim.status().message().c_str());
  QCOMPARE(w.memoryPage()->bar()->totalBytes(), sim->prediction.gpu_total_bytes);
  QCOMPARE(sim->prediction.gpu_total_bytes, report.recommendations.front().prediction.gpu_total_bytes);
  QVERIFY(sim->prediction.fits);
  // The timeline draws the step-time band after the step: measured steps expected to end
  // between low and high times the predicted step.
  const Prediction& best = report.recommendations.front().prediction;
  TimelineWidget* gantt = w.timelinePage()->gantt();
  QCOMPARE(gantt->bandLow(), best.time_band.low * best.step_time_s);
  QCOMPARE(gantt->bandHigh(), best.time_band.high * best.step_time_s);
  QVERIFY(gantt->bandLow() < best.step_time_s && best.step_time_s < gantt->bandHigh());

  // What-if: the base plan fits; step the micro-batch up until the verdict flips.
  QTRY_VERIFY_WITH_TIMEOUT(w.whatIfPage()->fits().has_value(), kTimeoutMs);
  QVERIFY(*w.whatIfPage()->fits());
  QVERIFY(w.whatIfPage()->verdict()->text().contains(QStringLiteral("Fits")));
  QSlider* slider = w.whatIfPage()->microBatchSlider();
  int flippedAt = 0;
  for (int mb = slider->value() + 1; mb <= slider->maximum(); ++mb) {
    const int before = whatIf.count();
    slider->setValue(mb);
    QTRY_VERIFY_WITH_TIMEOUT(whatIf.count() > before && !w.service()->busy(), kTimeoutMs);
    QVERIFY(w.whatIfPage()->fits().has_value());
    if (!*w.whatIfPage()->fits()) {
      flippedAt = mb;
      break;
    }
  }
  QVERIFY2(flippedAt > 0, "the micro-batch slider never crossed the fitting limit");
  QVERIFY(w.whatIfPage()->verdict()->text().contains(QStringLiteral("Does not fit")));
  // The simulator agrees: one below fits, this one does not.
  Plan p = w.selectedPlan()->plan;
  p.micro_batch = flippedAt;
  auto over = SimulateStepDetail(*spec, *profile, p);
  QVERIFY(over.ok());
  QVERIFY(!over->prediction.fits);
  p.micro_batch = flippedAt - 1;
  auto under = SimulateStepDetail(*spec, *profile, p);
  QVERIFY(under.ok());
  QVERIFY(under->prediction.fits);
  // The Memory page's usable line is the fit rule's (band and NCCL included): the fitting
  // peak is under it, the other over it.
  QVERIFY(static_cast<double>(under->prediction.gpu_total_bytes) <= under->usable_gpu_bytes);
  QVERIFY(static_cast<double>(over->prediction.gpu_total_bytes) > over->usable_gpu_bytes);
  QVERIFY(under->usable_gpu_bytes <
          static_cast<double>(under->prediction.gpu_capacity_bytes -
                              under->prediction.gpu_headroom_bytes));
}

void TestMainWindow::badModelNameShowsInWindow() {
  MainWindow w;
  w.show();
  QSignalSpy failed(w.service(), &PlanService::planFailed);
  w.inputs()->setModelText(QStringLiteral("t5-3bb"));
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, kTimeoutMs);
  QVERIFY2(w.errorText().contains(QStringLiteral("t5-3bb")), qPrintable(w.errorText()));
  QVERIFY2(w.errorText().contains(QStringLiteral("t5-3b")), qPrintable(w.errorText()));  // suggestion
}

void TestMainWindow::brokenConfigJsonNamesFileAndKey() {
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  const QString path = dir.filePath(QStringLiteral("config.json"));
  {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"model_type": "gpt2", "n_embd": "wide", "n_layer": 2, "n_head": 2, "vocab_size": 100})");
  }
  MainWindow w;
  w.show();
  QSignalSpy failed(w.service(), &PlanService::planFailed);
  w.inputs()->setModelText(path);
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, kTimeoutMs);
  QVERIFY2(w.errorText().contains(path), qPrintable(w.errorText()));
  QVERIFY2(w.errorText().contains(QStringLiteral("n_embd")), qPrintable(w.errorText()));

  // Malformed JSON: the file and the position.
  {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write("{\"model_type\": \"gpt2\",\n  \"n_embd\": }");
  }
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 2, kTimeoutMs);
  QVERIFY2(w.errorText().contains(path), qPrintable(w.errorText()));
}

void TestMainWindow::exportWritesTheCliConfig() {
  MainWindow w;
  QSignalSpy ready(w.service(), &PlanService::planReady);
  planT5(w);
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1 && w.selectedPlan().has_value(), kTimeoutMs);
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("ds_config.json"));
  QCOMPARE(w.writeConfig(path, false), QString());
  QFile f(path);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const std::string expected = EmitDsConfig(w.selectedPlan()->plan, EmitStyle::kExplicit).dump(2) + "\n";
  QCOMPARE(f.readAll().toStdString(), expected);
  // A folder that does not exist: the failure is reported, naming the path.
  const QString bad = dir.filePath(QStringLiteral("missing/ds_config.json"));
  QVERIFY(w.writeConfig(bad, false).contains(bad));
}

void TestMainWindow::unreadableProfileNamesFile() {
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("broken.yaml"));
  {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("name: broken\ngpu: [this is not a mapping\n");
  }
  MainWindow w;
  QSignalSpy failed(w.service(), &PlanService::planFailed);
  w.inputs()->setModelText(QStringLiteral("t5-3b"));
  w.inputs()->setProfileText(path);
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, kTimeoutMs);
  QVERIFY2(w.errorText().contains(path), qPrintable(w.errorText()));
  // The window still plans afterwards.
  QSignalSpy ready(w.service(), &PlanService::planReady);
  w.inputs()->setProfileText(QStringLiteral("h200-sxm"));
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1, kTimeoutMs);
  QVERIFY(w.errorText().isEmpty());
}

void TestMainWindow::newerRequestSupersedesOlder() {
  MainWindow w;
  QSignalSpy ready(w.service(), &PlanService::planReady);
  planT5(w);                                   // superseded before it can finish
  w.inputs()->setModelText(QStringLiteral("gpt2"));
  w.inputs()->setCluster(1, 2);
  w.plan();
  // Wait until every job (both searches and the detail of the surviving one) is done.
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() >= 1 && !w.service()->busy(), kTimeoutMs);
  QTest::qWait(50);
  QCOMPARE(ready.count(), 1);
  QCOMPARE(w.plansPage()->model()->report().model_name, std::string("gpt2"));
  QCOMPARE(w.plansPage()->model()->report().gpus_per_node, 2);
}

void TestMainWindow::checkPastedConfig() {
  MainWindow w;
  QSignalSpy ready(w.service(), &PlanService::planReady);
  QSignalSpy checked(w.service(), &PlanService::checkReady);
  QSignalSpy checkFailed(w.service(), &PlanService::checkFailed);
  planT5(w);
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1 && w.selectedPlan().has_value(), kTimeoutMs);
  // The best plan at twice its micro-batch, with pageable optimizer offload at stage 2.
  Plan p = w.selectedPlan()->plan;
  p.micro_batch *= 2;
  p.zero.stage = 2;
  p.zero.offload_optimizer.device = OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = false;
  emit w.checkPage()->checkRequested(QString::fromStdString(EmitDsConfig(p, EmitStyle::kExplicit).dump(2)),
                                     QStringLiteral("pasted"));
  QTRY_VERIFY_WITH_TIMEOUT(checked.count() == 1, kTimeoutMs);
  const CheckResult c = checked.at(0).at(0).value<CheckResult>();
  QVERIFY(c.detail.has_value());
  QCOMPARE(c.detail->prediction.plan.micro_batch, p.micro_batch);
  QCOMPARE(c.detail->prediction.plan.zero.stage, 2);
  // The same verdict as the simulator's for that plan.
  auto profile = FindHardwareProfile(w.service()->defaultProfile().toStdString(), DataDir());
  QVERIFY(profile.ok());
  auto spec = LoadModel("t5-3b", DataDir());
  QVERIFY(spec.ok());
  auto sim = SimulateStepDetail(*spec, *profile, c.detail->prediction.plan);
  QVERIFY(sim.ok());
  QCOMPARE(c.detail->prediction.fits, sim->prediction.fits);
  QCOMPARE(c.detail->prediction.gpu_total_bytes, sim->prediction.gpu_total_bytes);
  // The pageable-offload finding, and an alternative at the same global batch.
  bool pinned = false;
  for (const QString& warning : c.warnings) pinned = pinned || warning.contains(QStringLiteral("pin_memory"));
  QVERIFY2(pinned, qPrintable(c.warnings.join(QLatin1Char('\n'))));
  QVERIFY(c.alternative.has_value());
  QCOMPARE(c.alternative->plan.train_batch(), p.train_batch());
  // A broken config: the reader's error, naming the source, in the page; no crash.
  emit w.checkPage()->checkRequested(QStringLiteral("{\"zero_optimization\": {\"stage\": 7}}"),
                                     QStringLiteral("broken.json"));
  QTRY_VERIFY_WITH_TIMEOUT(checkFailed.count() == 1, kTimeoutMs);
  const QString err = checkFailed.at(0).at(0).toString();
  QVERIFY2(err.contains(QStringLiteral("stage")), qPrintable(err));
  QVERIFY2(err.contains(QStringLiteral("broken.json")), qPrintable(err));
}

void TestMainWindow::validationReportOverlay() {
  // A real `dsplan validate --json` report (an H200 run checked in under docs/validation/h200).
  const QString path = QString::fromUtf8(qgetenv("DSPLAN_DATA_DIR")) +
                       QStringLiteral("/docs/validation/h200/t5-3b_s3_mb8_gc.json");
  MainWindow w;
  w.show();
  ValidationPage* page = w.validationPage();
  QCOMPARE(page->open(path), QString());
  QVERIFY(w.errorText().isEmpty());
  auto d = LoadValidationReport(path);
  QVERIFY(d.ok());
  QCOMPARE(page->model()->rowCount(), static_cast<int>(d->rows.size()));
  QVERIFY(page->header()->text().contains(d->verdict.toHtmlEscaped()));
  // The charts overlay measured on predicted: one bar pair per task class (ms) and per memory
  // row (GiB), each measured step against the predicted step time.
  int classes = 0, memory = 0;
  for (const ValidationRowValue& r : d->rows) {
    if (r.bytes) {
      ++memory;
    } else if (r.quantity != QStringLiteral("step time")) {
      ++classes;
    }
  }
  auto bars = [](QChart* c) { return qobject_cast<QHorizontalBarSeries*>(c->series().value(0)); };
  QHorizontalBarSeries* cls = bars(page->classChart());
  QVERIFY(cls != nullptr);
  QCOMPARE(cls->barSets().size(), 2);
  QCOMPARE(cls->barSets()[0]->count(), classes);
  QHorizontalBarSeries* mem = bars(page->memoryChart());
  QVERIFY(mem != nullptr);
  QCOMPARE(mem->barSets()[1]->count(), memory);
  // The memory bars in GiB, bottom-up: the last bar is the first memory row.
  const ValidationRowValue* peak = d->row(QStringLiteral("peak allocated"));
  QVERIFY(peak != nullptr);
  QVERIFY(std::abs(mem->barSets()[1]->at(memory - 1) - peak->measured / (1024.0 * 1024 * 1024)) < 1e-9);
  int measuredSteps = -1;
  for (QAbstractSeries* s : page->stepChart()->series()) {
    if (auto* sc = qobject_cast<QScatterSeries*>(s)) measuredSteps = static_cast<int>(sc->count());
  }
  QCOMPARE(measuredSteps, static_cast<int>(d->stepSeconds.size()));

  // Wrong kind and broken files: the window's error line names the file and the key.
  QTemporaryDir dir;
  const QString plan = dir.filePath(QStringLiteral("plan.json"));
  {
    QFile f(plan);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"schema": "dsplan/plan", "schema_version": 1, "recommendations": []})");
  }
  QVERIFY(!page->open(plan).isEmpty());
  QVERIFY2(w.errorText().contains(plan) && w.errorText().contains(QStringLiteral("schema")),
           qPrintable(w.errorText()));
  const QString broken = dir.filePath(QStringLiteral("broken.json"));
  {
    QFile in(path);
    QVERIFY(in.open(QIODevice::ReadOnly));
    QByteArray text = in.readAll();
    text.replace("\"judged\": true", "\"judged\": \"yes\"");
    QFile f(broken);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(text);
  }
  QVERIFY(!page->open(broken).isEmpty());
  QVERIFY2(w.errorText().contains(broken) && w.errorText().contains(QStringLiteral("rows[0].judged")),
           qPrintable(w.errorText()));
  QCOMPARE(page->model()->rowCount(), 0);
  QVERIFY(!page->open(dir.filePath(QStringLiteral("missing.json"))).isEmpty());
  QVERIFY2(w.errorText().contains(QStringLiteral("missing.json")), qPrintable(w.errorText()));
}

void TestMainWindow::memoryTwoPlansSideBySide() {
  MainWindow w;
  w.show();
  QSignalSpy ready(w.service(), &PlanService::planReady);
  QSignalSpy detail(w.service(), &PlanService::detailReady);
  planT5(w);
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1 && detail.count() >= 1, kTimeoutMs);
  const PlanReport& report = w.plansPage()->model()->report();
  QVERIFY(report.recommendations.size() >= 2);
  MemoryPage* page = w.memoryPage();
  QCOMPARE(page->compareBox()->count(), static_cast<int>(report.recommendations.size()) + 1);
  page->compareWith(1);
  const Prediction& a = report.recommendations[0].prediction;
  const Prediction& b = report.recommendations[1].prediction;
  QVERIFY(!page->compareBar()->isHidden());
  QCOMPARE(page->bar()->totalBytes(), a.gpu_total_bytes);
  QCOMPARE(page->compareBar()->totalBytes(), b.gpu_total_bytes);
  MemoryCompareModel* m = page->compareModel();
  for (int c = 0; c < kNumMemCategories; ++c) {
    QCOMPARE(m->index(c, MemoryCompareModel::kDifference).data(MemoryCompareModel::SortRole).toLongLong(),
             b.gpu_breakdown_at_peak[c] - a.gpu_breakdown_at_peak[c]);
  }
  QCOMPARE(m->index(MemoryCompareModel::kTotalRow, MemoryCompareModel::kDifference)
               .data(MemoryCompareModel::SortRole)
               .toLongLong(),
           b.gpu_total_bytes - a.gpu_total_bytes);
  page->compareWith(-1);
  QVERIFY(page->compareBar()->isHidden());
  QCOMPARE(m->rowCount(), 0);
}

void TestMainWindow::exportMatchesCliBytes() {
  // The CLI plans the same request and writes its best plan's config; the window's export of
  // its best plan must have the same bytes, in both forms.
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  auto cli = [&](const QString& out, bool hfAuto) {
    QStringList args = {QStringLiteral("--model"), QStringLiteral("t5-3b"), QStringLiteral("--gpus"),
                        QStringLiteral("4"), QStringLiteral("--quiet"), QStringLiteral("--emit"), out};
    if (hfAuto) args << QStringLiteral("--hf-auto");
    QProcess p;
    p.start(QStringLiteral(DSPLAN_CLI), args);
    if (!p.waitForFinished(kTimeoutMs)) return QByteArray("timeout");
    if (p.exitCode() != 0) return QByteArray("exit ") + QByteArray::number(p.exitCode()) + p.readAllStandardError();
    QFile f(out);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray("no file");
  };
  const QByteArray cliExplicit = cli(dir.filePath(QStringLiteral("cli.json")), false);
  const QByteArray cliAuto = cli(dir.filePath(QStringLiteral("cli-auto.json")), true);
  QVERIFY2(cliExplicit.startsWith("{"), cliExplicit.constData());
  QVERIFY2(cliAuto.startsWith("{"), cliAuto.constData());
  QVERIFY(cliExplicit != cliAuto);

  MainWindow w;
  QSignalSpy ready(w.service(), &PlanService::planReady);
  planT5(w);
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1 && w.selectedPlan().has_value(), kTimeoutMs);
  const QString path = dir.filePath(QStringLiteral("ds_config.json"));
  QCOMPARE(w.writeConfig(path, false), QString());
  QFile f(path);
  QVERIFY(f.open(QIODevice::ReadOnly));
  QCOMPARE(f.readAll(), cliExplicit);
  f.close();
  // An existing file is not replaced without the user's yes; with it, it is.
  const QString refused = w.writeConfig(path, true);
  QVERIFY2(refused.contains(path) && refused.contains(QStringLiteral("exists")), qPrintable(refused));
  QVERIFY(f.open(QIODevice::ReadOnly));
  QCOMPARE(f.readAll(), cliExplicit);
  f.close();
  QCOMPARE(w.writeConfig(path, true, /*replace=*/true), QString());
  QVERIFY(f.open(QIODevice::ReadOnly));
  QCOMPARE(f.readAll(), cliAuto);
  f.close();
  // The other texts are the launcher's, for the same plan.
  const Plan& plan = w.selectedPlan()->plan;
  const ExportTexts t = w.exportTexts(false);
  QStringList args;
  for (const std::string& a : HfTrainerArgs(plan)) args << QString::fromStdString(a);
  QCOMPARE(t.trainerArgs, args.join(QLatin1Char(' ')));
  LaunchSpec hf = LaunchSpecForPlan(plan);
  hf.script_args = HfTrainerArgs(plan);
  QVERIFY(t.launch.contains(QString::fromStdString(LaunchCommand(hf))));
  QVERIFY(t.hostfile.isEmpty());  // one node
  // A failed write is reported with its path.
  const QString bad = dir.filePath(QStringLiteral("missing/ds_config.json"));
  QVERIFY(w.writeConfig(bad, false).contains(bad));
}

void TestMainWindow::newRequestCancelsRunningSearch() {
  MainWindow w;
  QSignalSpy ready(w.service(), &PlanService::planReady);
  QSignalSpy started(w.service(), &PlanService::planStarted);
  // The slowest default search (t5-3b on 4 GPUs, about 0.7 s on a 2-core machine): the newer
  // request must arrive while it still runs. Since the search got faster, a fixed wait before
  // the second request could outlast the older search.
  w.inputs()->setModelText(QStringLiteral("t5-3b"));
  w.inputs()->setCluster(1, 4);
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(w.service()->busy(), kTimeoutMs);
  QTest::qWait(20);  // the older search is under way
  w.inputs()->setModelText(QStringLiteral("gpt2"));
  w.inputs()->setCluster(1, 2);
  QElapsedTimer sinceCancel;
  sinceCancel.start();
  w.plan();
  QCOMPARE(started.count(), 2);
  // How long the cancelled search takes to stop (printed, not judged: timing is the machine's).
  QTRY_VERIFY_WITH_TIMEOUT(w.service()->cancelledSearches() == 1, kTimeoutMs);
  qInfo("the cancelled t5-3b search stopped %lld ms after the newer request",
        static_cast<long long>(sinceCancel.elapsed()));
  QVERIFY(started.at(1).at(0).toBool());  // the window says the older search was cancelled
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() >= 1 && !w.service()->busy(), kTimeoutMs);
  QTest::qWait(50);
  // The older search stopped through its cancel flag (it did not run to the end), and only the
  // newer result arrived.
  QCOMPARE(w.service()->cancelledSearches(), 1);
  QCOMPARE(ready.count(), 1);
  QCOMPARE(w.plansPage()->model()->report().model_name, std::string("gpt2"));
}

void TestMainWindow::exportHostfileForSeveralNodes() {
  // gpt2 on 2 nodes x 2 GPUs: the window's hostfile and config are the bytes the CLI writes for
  // the same request (--emit and --hostfile), and the launch line names the hostfile.
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  const QString cfg = dir.filePath(QStringLiteral("cli.json"));
  const QString hosts = dir.filePath(QStringLiteral("cli-hostfile"));
  QProcess p;
  p.start(QStringLiteral(DSPLAN_CLI),
          {QStringLiteral("--model"), QStringLiteral("gpt2"), QStringLiteral("--gpus"), QStringLiteral("2"),
           QStringLiteral("--nodes"), QStringLiteral("2"), QStringLiteral("--quiet"),
           QStringLiteral("--emit"), cfg, QStringLiteral("--hostfile"), hosts});
  QVERIFY(p.waitForFinished(kTimeoutMs));
  QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
  QFile fc(cfg), fh(hosts);
  QVERIFY(fc.open(QIODevice::ReadOnly) && fh.open(QIODevice::ReadOnly));

  MainWindow w;
  QSignalSpy ready(w.service(), &PlanService::planReady);
  w.inputs()->setModelText(QStringLiteral("gpt2"));
  w.inputs()->setCluster(2, 2);
  w.plan();
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1 && w.selectedPlan().has_value(), kTimeoutMs);
  QCOMPARE(w.selectedPlan()->plan.nodes, 2);
  const ExportTexts t = w.exportTexts(false);
  QCOMPARE(t.config.toUtf8(), fc.readAll());
  QCOMPARE(t.hostfile.toUtf8(), fh.readAll());
  QVERIFY(t.launch.contains(QStringLiteral("--hostfile hostfile")));
  const QString saved = dir.filePath(QStringLiteral("hostfile"));
  QCOMPARE(MainWindow::writeFile(saved, t.hostfile, false), QString());
  QVERIFY(MainWindow::writeFile(saved, t.hostfile, false).contains(QStringLiteral("exists")));
}

// The "built outside deepspeed.zero.Init" box (the CLI's --no-zero-init) reaches every plan
// the search makes; unchecked, the plans assume zero.Init.
void TestMainWindow::modelBuiltOutsideZeroInitReachesThePlans() {
  for (bool outside : {false, true}) {
    MainWindow w;
    QSignalSpy ready(w.service(), &PlanService::planReady);
    auto* box = w.inputs()->findChild<QCheckBox*>(QStringLiteral("noZeroInit"));
    QVERIFY(box != nullptr);
    box->setChecked(outside);
    QCOMPARE(w.inputs()->inputs().noZeroInit, outside);
    w.inputs()->setModelText(QStringLiteral("gpt2"));
    w.inputs()->setCluster(1, 2);
    w.plan();
    QTRY_VERIFY_WITH_TIMEOUT(ready.count() == 1 && w.selectedPlan().has_value(), kTimeoutMs);
    QCOMPARE(w.selectedPlan()->plan.zero_init, !outside);
  }
}

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"

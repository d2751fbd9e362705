// SPDX-License-Identifier: Apache-2.0
// dsplan-gui: explore the plans, memory and timeline of DeepSpeed configurations.
//
//   dsplan-gui [--model NAME] [--gpus N] [--nodes N] [--screenshots DIR]
//
// --model/--gpus/--nodes fill the inputs and plan at once. --screenshots DIR plans (t5-3b on
// 4 GPUs unless given), selects the best plan, saves one PNG per page into DIR at 1280x800 and
// exits (scripts/screenshots.sh runs it offscreen).
#include <QApplication>
#include <QCommandLineParser>
#include <QDialog>
#include <QDir>
#include <QPlainTextEdit>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>

#include <cstdio>

#include "core/model_catalog.h"
#include "inputspanel.h"
#include "mainwindow.h"
#include "models/planstablemodel.h"
#include "pages.h"
#include "planner/ds_config.h"
#include "timelinewidget.h"

using dsplan::gui::MainWindow;

namespace {

// Waits (processing events) until |done| or |ms| pass; false on timeout.
template <typename Pred>
bool waitFor(Pred done, int ms) {
  QElapsedTimer t;
  t.start();
  while (!done()) {
    if (t.elapsed() > ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
  }
  return true;
}

int screenshots(MainWindow& w, const QString& dir) {
  if (!QDir().mkpath(dir)) {
    std::fprintf(stderr, "dsplan-gui: %s: cannot create the folder\n", qPrintable(dir));
    return 2;
  }
  bool detail = false, whatIf = false, check = false, failed = false;
  dsplan::StepDetail last;
  QObject::connect(w.service(), &dsplan::gui::PlanService::detailReady,
                   [&](const dsplan::StepDetail& d) {
                     detail = true;
                     last = d;
                   });
  QObject::connect(w.service(), &dsplan::gui::PlanService::whatIfReady, [&] { whatIf = true; });
  QObject::connect(w.service(), &dsplan::gui::PlanService::checkReady, [&] { check = true; });
  QObject::connect(w.service(), &dsplan::gui::PlanService::checkFailed, [&] { check = true; });
  QObject::connect(w.service(), &dsplan::gui::PlanService::planFailed, [&] { failed = true; });
  w.plan();
  if (!waitFor([&] { return failed || (detail && whatIf); }, 120000) || failed) {
    std::fprintf(stderr, "dsplan-gui: planning failed: %s\n", qPrintable(w.errorText()));
    return 1;
  }
  // Check page: a hand-made variant of the best plan, as a user might paste it: stage 2 with
  // pageable optimizer offload, overlap_comm off and twice the micro-batch.
  dsplan::Plan p = w.selectedPlan()->plan;
  p.micro_batch *= 2;
  p.zero.stage = 2;
  p.zero.offload_optimizer.device = dsplan::OffloadDevice::kCpu;
  p.zero.offload_optimizer.pin_memory = false;
  p.zero.overlap_comm = false;
  w.checkPage()->editor()->setPlainText(
      QString::fromStdString(dsplan::EmitDsConfig(p, dsplan::EmitStyle::kExplicit).dump(2)));
  emit w.checkPage()->checkRequested(w.checkPage()->editor()->toPlainText(),
                                     QStringLiteral("ds_config.json (pasted)"));
  waitFor([&] { return check; }, 60000);
  // Timeline: the start of the backward pass, where names fit and the collectives overlap.
  dsplan::gui::TimelineWidget* gantt = w.timelinePage()->gantt();
  const double step = last.prediction.step_time_s;
  double backward = 0.35 * step;
  for (const dsplan::TimelineTask& t : last.tasks) {
    if (t.kind == dsplan::TaskKind::kBackward) {
      backward = t.start_s;
      break;
    }
  }
  gantt->setRange(backward - 0.01 * step, backward + 0.03 * step);
  // Validation: a real report of an H200 run (docs/validation/h200).
  const QString report = QString::fromStdString(dsplan::DataDir()) +
                         QStringLiteral("/docs/validation/h200/t5-3b_s3_mb8_gc.json");
  if (!w.validationPage()->open(report).isEmpty()) {
    std::fprintf(stderr, "dsplan-gui: %s\n", qPrintable(w.errorText()));
    return 1;
  }
  const char* names[] = {"plans", "memory", "timeline", "whatif", "tradeoff", "check", "validation"};
  for (int i = 0; i < w.tabs()->count() && i < 7; ++i) {
    w.tabs()->setCurrentIndex(i);
    waitFor([] { return false; }, 300);
    const QString path = QDir(dir).filePath(QStringLiteral("gui-%1.png").arg(names[i]));
    if (!w.grab().save(path)) {
      std::fprintf(stderr, "dsplan-gui: %s: cannot write\n", qPrintable(path));
      return 1;
    }
    std::printf("wrote %s\n", qPrintable(path));
  }
  // The whole step on the timeline, with the step-time band after its end.
  gantt->resetZoom();
  w.tabs()->setCurrentWidget(w.timelinePage());
  waitFor([] { return false; }, 300);
  {
    const QString path = QDir(dir).filePath(QStringLiteral("gui-timeline-step.png"));
    if (!w.grab().save(path)) {
      std::fprintf(stderr, "dsplan-gui: %s: cannot write\n", qPrintable(path));
      return 1;
    }
    std::printf("wrote %s\n", qPrintable(path));
  }
  // Two plans side by side: the best against the third choice.
  w.memoryPage()->compareWith(2);
  w.tabs()->setCurrentWidget(w.memoryPage());
  waitFor([] { return false; }, 300);
  {
    const QString path = QDir(dir).filePath(QStringLiteral("gui-memory-compare.png"));
    if (!w.grab().save(path)) {
      std::fprintf(stderr, "dsplan-gui: %s: cannot write\n", qPrintable(path));
      return 1;
    }
    std::printf("wrote %s\n", qPrintable(path));
  }
  w.memoryPage()->compareWith(-1);
  // The export dialog over the window, on its launch-command tab.
  if (QDialog* d = w.createExportDialog()) {
    d->show();
    if (auto* tabs = d->findChild<QTabWidget*>()) tabs->setCurrentIndex(2);
    d->move(w.geometry().center() - d->rect().center());
    waitFor([] { return false; }, 300);
    const QString path = QDir(dir).filePath(QStringLiteral("gui-export.png"));
    if (!d->grab().save(path)) {
      std::fprintf(stderr, "dsplan-gui: %s: cannot write\n", qPrintable(path));
      return 1;
    }
    std::printf("wrote %s\n", qPrintable(path));
    delete d;
  }
  // Plans with choices that do not fit: llama-2-7b at 4096 tokens on one GPU, the first greyed
  // row selected so that its reason shows under the table.
  bool ready = false;
  detail = false;
  QObject::connect(w.service(), &dsplan::gui::PlanService::planReady, [&] { ready = true; });
  w.inputs()->setModelText(QStringLiteral("llama-2-7b"));
  w.inputs()->setCluster(1, 1);
  w.inputs()->setSeqLen(4096);
  w.plan();
  if (!waitFor([&] { return failed || (ready && detail); }, 120000) || failed) {
    std::fprintf(stderr, "dsplan-gui: planning failed: %s\n", qPrintable(w.errorText()));
    return 1;
  }
  w.tabs()->setCurrentIndex(0);
  QTableView* view = w.plansPage()->view();
  for (int r = 0; r < view->model()->rowCount(); ++r) {
    const QModelIndex i = view->model()->index(r, 0);
    if (!i.data(dsplan::gui::PlansTableModel::FitsRole).toBool()) {
      view->setCurrentIndex(i);
      break;
    }
  }
  waitFor([] { return false; }, 300);
  const QString path = QDir(dir).filePath(QStringLiteral("gui-plans-rejected.png"));
  if (!w.grab().save(path)) {
    std::fprintf(stderr, "dsplan-gui: %s: cannot write\n", qPrintable(path));
    return 1;
  }
  std::printf("wrote %s\n", qPrintable(path));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("dsplan-gui"));
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Explore DeepSpeed plans, memory and timelines"));
  parser.addHelpOption();
  QCommandLineOption model(QStringLiteral("model"), QStringLiteral("Model to plan at start"),
                           QStringLiteral("name"));
  QCommandLineOption gpus(QStringLiteral("gpus"), QStringLiteral("GPUs per node"), QStringLiteral("n"));
  QCommandLineOption nodes(QStringLiteral("nodes"), QStringLiteral("Nodes"), QStringLiteral("n"));
  QCommandLineOption shots(QStringLiteral("screenshots"),
                           QStringLiteral("Save one PNG per page into DIR and exit"),
                           QStringLiteral("dir"));
  parser.addOptions({model, gpus, nodes, shots});
  parser.process(app);
  MainWindow w;
  const bool autoPlan = parser.isSet(model) || parser.isSet(shots);
  w.inputs()->setModelText(parser.isSet(model) ? parser.value(model) : QStringLiteral("t5-3b"));
  w.inputs()->setCluster(parser.isSet(nodes) ? parser.value(nodes).toInt() : 1,
                         parser.isSet(gpus) ? parser.value(gpus).toInt() : 4);
  w.show();
  if (parser.isSet(shots)) return screenshots(w, parser.value(shots));
  if (autoPlan) QTimer::singleShot(0, &w, &MainWindow::plan);
  return app.exec();
}

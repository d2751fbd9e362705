// SPDX-License-Identifier: Apache-2.0
#include "mainwindow.h"

#include <QAction>
#include <QFile>
#include <QFileDialog>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QSaveFile>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QVBoxLayout>

#include "inputspanel.h"
#include "models/format.h"
#include "models/planstablemodel.h"
#include "pages.h"
#include "planner/ds_config.h"

namespace dsplan::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("dsplan — which DeepSpeed plan fits, and which is fastest"));
  m_service = new PlanService(this);
  m_inputs = new InputsPanel(*m_service);
  auto* scroll = new QScrollArea;
  scroll->setWidget(m_inputs);
  scroll->setWidgetResizable(true);
  scroll->setMinimumWidth(300);
  scroll->setMaximumWidth(340);

  m_tabs = new QTabWidget;
  m_plans = new PlansPage;
  m_memory = new MemoryPage;
  m_timeline = new TimelinePage;
  m_whatIf = new WhatIfPage;
  m_tradeoff = new TradeoffPage;
  m_check = new CheckPage;
  m_tabs->addTab(m_plans, tr("Plans"));
  m_tabs->addTab(m_memory, tr("Memory"));
  m_tabs->addTab(m_timeline, tr("Timeline"));
  m_tabs->addTab(m_whatIf, tr("What-if"));
  m_tabs->addTab(m_tradeoff, tr("Trade-off"));
  m_tabs->addTab(m_check, tr("Check my config"));

  m_error = new QLabel;
  m_error->setObjectName(QStringLiteral("errorLine"));
  m_error->setWordWrap(true);
  m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_error->setStyleSheet(QStringLiteral(
      "QLabel { background: #fde2e1; color: #8a1010; border: 1px solid #e0a0a0; padding: 6px; }"));
  m_error->hide();
  auto* right = new QWidget;
  auto* rv = new QVBoxLayout(right);
  rv->setContentsMargins(0, 0, 0, 0);
  rv->addWidget(m_error);
  rv->addWidget(m_tabs, 1);
  auto* split = new QSplitter;
  split->addWidget(scroll);
  split->addWidget(right);
  split->setStretchFactor(1, 1);
  setCentralWidget(split);

  m_status = new QLabel(tr("Ready."));
  m_progress = new QProgressBar;
  m_progress->setRange(0, 100);
  m_progress->setMaximumWidth(200);
  m_progress->hide();
  statusBar()->addWidget(m_status, 1);
  statusBar()->addPermanentWidget(m_progress);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("Export ds_config.json…"), this, [this] { exportConfig(false); });
  file->addAction(tr("Export ds_config.json (HF Trainer \"auto\" form)…"), this,
                  [this] { exportConfig(true); });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  connect(m_inputs, &InputsPanel::planRequested, this, &MainWindow::plan);
  connect(m_service, &PlanService::busyChanged, m_inputs, &InputsPanel::setBusy);
  connect(m_service, &PlanService::planStarted, this, [this] {
    m_progress->setValue(0);
    m_progress->show();
    m_status->setText(tr("Searching…"));
  });
  connect(m_service, &PlanService::planProgress, this,
          [this](double f) { m_progress->setValue(static_cast<int>(100 * f)); });
  connect(m_service, &PlanService::planFailed, this, [this](const QString& m) {
    m_progress->hide();
    m_status->setText(tr("The request failed."));
    showError(m);
  });
  connect(m_service, &PlanService::planReady, this, [this](const PlanReport& r) {
    m_progress->hide();
    clearError();
    m_status->setText(tr("%1: %2 plans simulated in %3 s.")
                          .arg(QString::fromStdString(r.model_name))
                          .arg(r.plans_simulated)
                          .arg(r.seconds, 0, 'f', 2));
    m_selected.reset();
    m_plans->setReport(r);
    m_tradeoff->setReport(r);
    if (!r.recommendations.empty()) {
      m_plans->selectPlan(0);
    } else {
      showError(tr("No plan fits %1 on %2 × %3 GPUs; the Plans table says why per choice.")
                    .arg(QString::fromStdString(r.model_name))
                    .arg(r.nodes)
                    .arg(r.gpus_per_node));
    }
  });
  connect(m_plans, &PlansPage::planSelected, this, [this](int index) {
    if (const ScoredPlan* p = m_plans->model()->plan(index)) select(*p);
  });
  connect(m_tradeoff, &TradeoffPage::planClicked, this, [this](const ScoredPlan& p) {
    select(p);
    m_tabs->setCurrentWidget(m_memory);
  });
  connect(m_service, &PlanService::detailReady, this, [this](const StepDetail& d) {
    m_memory->setDetail(d);
    m_timeline->setDetail(d);
  });
  connect(m_service, &PlanService::detailFailed, this, &MainWindow::showError);
  connect(m_whatIf, &WhatIfPage::simulateRequested, m_service, &PlanService::requestWhatIf);
  connect(m_service, &PlanService::whatIfReady, m_whatIf, &WhatIfPage::setResult);
  connect(m_check, &CheckPage::checkRequested, m_service, &PlanService::requestCheck);
  connect(m_service, &PlanService::checkReady, m_check, &CheckPage::setResult);
  connect(m_service, &PlanService::checkFailed, m_check, &CheckPage::setError);
  resize(1280, 800);
}

void MainWindow::plan() { m_service->requestPlan(m_inputs->inputs()); }

void MainWindow::select(const ScoredPlan& plan) {
  m_selected = plan;
  m_service->requestDetail(plan.plan);
  m_whatIf->setBase(plan.plan);
}

QString MainWindow::errorText() const { return m_error->isVisible() || !m_error->text().isEmpty() ? m_error->text() : QString(); }

void MainWindow::showError(const QString& message) {
  m_error->setText(message);
  m_error->show();
}

void MainWindow::clearError() {
  m_error->clear();
  m_error->hide();
}

QString MainWindow::writeConfig(const QString& path, bool hfAuto) const {
  if (!m_selected) return tr("No plan is selected.");
  const std::string text =
      EmitDsConfig(m_selected->plan, hfAuto ? EmitStyle::kHfAuto : EmitStyle::kExplicit).dump(2) + "\n";
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return tr("%1: cannot write (%2)").arg(path, f.errorString());
  if (f.write(text.data(), static_cast<qint64>(text.size())) != static_cast<qint64>(text.size()) ||
      !f.commit()) {
    return tr("%1: cannot write (%2)").arg(path, f.errorString());
  }
  return {};
}

void MainWindow::exportConfig(bool hfAuto) {
  if (!m_selected) {
    showError(tr("Export: select a plan first."));
    return;
  }
  // QFileDialog asks before replacing an existing file (QFileDialog::DontConfirmOverwrite unset).
  const QString path = QFileDialog::getSaveFileName(this, tr("Export ds_config.json"),
                                                    QStringLiteral("ds_config.json"),
                                                    tr("JSON (*.json)"));
  if (path.isEmpty()) return;
  const QString err = writeConfig(path, hfAuto);
  if (!err.isEmpty()) {
    showError(err);
    return;
  }
  m_status->setText(tr("Wrote %1%2.").arg(path, hfAuto ? tr(" (HF Trainer form)") : QString()));
}

}  // namespace dsplan::gui

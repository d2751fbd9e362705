// SPDX-License-Identifier: Apache-2.0
// First: launcher.h names a field `slots`, which Qt's headers define as a macro.
#include "planner/launcher.h"
// clang-format off
#include "mainwindow.h"
// clang-format on

#include <QAction>
#include <QButtonGroup>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QFile>
#include <QDir>
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
  m_validation = new ValidationPage;
  m_tabs->addTab(m_plans, tr("Plans"));
  m_tabs->addTab(m_memory, tr("Memory"));
  m_tabs->addTab(m_timeline, tr("Timeline"));
  m_tabs->addTab(m_whatIf, tr("What-if"));
  m_tabs->addTab(m_tradeoff, tr("Trade-off"));
  m_tabs->addTab(m_check, tr("Check my config"));
  m_tabs->addTab(m_validation, tr("Validation"));

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
  file->addAction(tr("&Export plan (config, Trainer arguments, launch, hostfile)…"),
                  QKeySequence(tr("Ctrl+E")), this, &MainWindow::exportPlan);
  file->addAction(tr("Export ds_config.json…"), this, [this] { exportConfig(false); });
  file->addAction(tr("Export ds_config.json (HF Trainer \"auto\" form)…"), this,
                  [this] { exportConfig(true); });
  file->addAction(tr("Open a validation report…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open a dsplan validate --json report"), {}, tr("JSON (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    m_tabs->setCurrentWidget(m_validation);
    if (m_validation->open(path).isEmpty()) clearError();
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  connect(m_inputs, &InputsPanel::planRequested, this, &MainWindow::plan);
  connect(m_service, &PlanService::busyChanged, m_inputs, &InputsPanel::setBusy);
  connect(m_service, &PlanService::planStarted, this, [this](bool cancelledOlder) {
    m_progress->setValue(0);
    m_progress->show();
    m_status->setText(cancelledOlder ? tr("Searching… (the previous search was cancelled)")
                                     : tr("Searching…"));
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
    m_memory->setReport(r);
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
  connect(m_validation, &ValidationPage::failed, this, &MainWindow::showError);
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

ExportTexts MainWindow::exportTexts(bool hfAuto) const {
  return m_selected ? exportTextsFor(m_selected->plan, hfAuto) : ExportTexts{};
}

ExportTexts MainWindow::exportTextsFor(const Plan& plan, bool hfAuto) {
  ExportTexts t;
  // As `dsplan` writes and prints them (cli/plan_command.cc): the config file's bytes, and the
  // launch lines for a config named ds_config.json and a hostfile named hostfile.
  t.config = QString::fromStdString(
      EmitDsConfig(plan, hfAuto ? EmitStyle::kHfAuto : EmitStyle::kExplicit).dump(2) + "\n");
  const std::vector<std::string> args = HfTrainerArgs(plan);
  QStringList a;
  for (const std::string& s : args) a << QString::fromStdString(s);
  t.trainerArgs = a.join(QLatin1Char(' '));
  LaunchSpec hf = LaunchSpecForPlan(plan);
  hf.script_args = args;
  LaunchSpec ds = hf;
  ds.kind = ScriptKind::kDeepSpeed;
  ds.script_args.clear();
  std::string launch = "#!/bin/sh\n# dsplan: " + PlanSummary(plan) + ", micro-batch " +
                       std::to_string(plan.micro_batch) + " x " + std::to_string(plan.grad_accum) +
                       " on " + std::to_string(plan.nodes) + " x " +
                       std::to_string(plan.gpus_per_node) + " GPUs\n";
  launch += "# HF Trainer script (these Trainer arguments must match the config):\n" +
            LaunchCommand(hf) + "\n";
  launch += "# plain DeepSpeed script (deepspeed.add_config_arguments):\n# " + LaunchCommand(ds) + "\n";
  launch += std::string("# the same under torchrun") + (plan.nodes > 1 ? " (run on every node)" : "") +
            ":\n# " + TorchrunCommand(hf) + "\n";
  if (plan.nodes > 1) {
    std::string srun = SrunCommand(hf);
    for (size_t p = srun.find('\n'); p != std::string::npos; p = srun.find('\n', p + 3)) {
      srun.replace(p, 1, "\n# ");
    }
    launch += "# under Slurm (inside an allocation of " + std::to_string(plan.nodes) +
              " nodes):\n# " + srun + "\n";
    t.hostfile = QString::fromStdString(HostfileText(hf));
  }
  t.launch = QString::fromStdString(launch);
  return t;
}

QString MainWindow::writeFile(const QString& path, const QString& text, bool replace) {
  if (!replace && QFileInfo::exists(path)) {
    return tr("%1: exists; not replaced (confirm the replacement to overwrite it)").arg(path);
  }
  if (QFileInfo(path).isDir()) return tr("%1: is a folder; choose a file name").arg(path);
  const QByteArray bytes = text.toUtf8();
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return tr("%1: cannot write (%2)").arg(path, f.errorString());
  if (f.write(bytes) != bytes.size() || !f.commit()) {
    return tr("%1: cannot write (%2)").arg(path, f.errorString());
  }
  return {};
}

QString MainWindow::writeConfig(const QString& path, bool hfAuto, bool replace) const {
  if (!m_selected) return tr("No plan is selected.");
  return writeFile(path, exportTexts(hfAuto).config, replace);
}

void MainWindow::saveWithDialog(QWidget* parent, const QString& title, const QString& name,
                                const QString& text) {
  // Our own confirmation (not the platform dialog's, which some platforms skip): a file that
  // exists is replaced only after the user says so.
  const QString path = QFileDialog::getSaveFileName(parent, title, name, QString(), nullptr,
                                                    QFileDialog::DontConfirmOverwrite);
  if (path.isEmpty()) return;
  bool replace = false;
  if (QFileInfo::exists(path)) {
    const auto answer = QMessageBox::question(
        parent, tr("Replace the file?"),
        tr("%1 already exists. Replace it?").arg(QDir::toNativeSeparators(path)),
        QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
    if (answer != QMessageBox::Yes) {
      m_status->setText(tr("%1 not replaced.").arg(path));
      return;
    }
    replace = true;
  }
  const QString err = writeFile(path, text, replace);
  if (!err.isEmpty()) {
    showError(err);
    QMessageBox::warning(parent, tr("Export failed"), err);
    return;
  }
  clearError();
  m_status->setText(tr("Wrote %1.").arg(path));
}

void MainWindow::exportConfig(bool hfAuto) {
  if (!m_selected) {
    showError(tr("Export: select a plan first."));
    return;
  }
  saveWithDialog(this, tr("Export ds_config.json"), QStringLiteral("ds_config.json"),
                 exportTexts(hfAuto).config);
}

void MainWindow::exportPlan() {
  if (QDialog* dialog = createExportDialog()) {
    dialog->exec();
    delete dialog;
  }
}

QDialog* MainWindow::createExportDialog() {
  if (!m_selected) {
    showError(tr("Export: select a plan first."));
    return nullptr;
  }
  auto* dialog = new QDialog(this);
  dialog->setWindowTitle(tr("Export the selected plan"));
  dialog->resize(900, 560);
  auto* explicitForm = new QRadioButton(tr("explicit values (as dsplan writes by default)"));
  auto* hfForm = new QRadioButton(tr("HF Trainer \"auto\" form (as dsplan --hf-auto)"));
  explicitForm->setChecked(true);
  auto* tabs = new QTabWidget;
  QFont mono(QStringLiteral("DejaVu Sans Mono"));
  mono.setStyleHint(QFont::Monospace);
  auto text = [&](const QString& body) {
    auto* e = new QPlainTextEdit(body);
    e->setReadOnly(true);
    e->setFont(mono);
    e->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    return e;
  };
  const bool multiNode = m_selected->plan.nodes > 1;
  const ExportTexts t = exportTexts(false);
  QPlainTextEdit* config = text(t.config);
  tabs->addTab(config, QStringLiteral("ds_config.json"));
  tabs->addTab(text(t.trainerArgs), tr("Trainer arguments"));
  tabs->addTab(text(t.launch), tr("Launch command"));
  if (multiNode) tabs->addTab(text(t.hostfile), QStringLiteral("hostfile"));
  // The texts are made again at each use from the plan selected when the dialog opened.
  const ScoredPlan plan = *m_selected;
  auto currentTexts = [hfForm, plan] { return exportTextsFor(plan.plan, hfForm->isChecked()); };
  connect(hfForm, &QRadioButton::toggled, dialog,
          [config, currentTexts] { config->setPlainText(currentTexts().config); });
  auto* buttons = new QHBoxLayout;
  auto addSave = [&](const QString& label, const QString& name, auto pick) {
    auto* b = new QPushButton(label);
    connect(b, &QPushButton::clicked, dialog, [this, dialog, name, pick, currentTexts] {
      saveWithDialog(dialog, tr("Save %1").arg(name), name, pick(currentTexts()));
    });
    buttons->addWidget(b);
  };
  addSave(tr("Save ds_config.json…"), QStringLiteral("ds_config.json"),
          [](const ExportTexts& x) { return x.config; });
  addSave(tr("Save launch.sh…"), QStringLiteral("launch.sh"),
          [](const ExportTexts& x) { return x.launch; });
  if (multiNode) {
    addSave(tr("Save hostfile…"), QStringLiteral("hostfile"),
            [](const ExportTexts& x) { return x.hostfile; });
  }
  buttons->addStretch(1);
  auto* close = new QDialogButtonBox(QDialogButtonBox::Close);
  connect(close, &QDialogButtonBox::rejected, dialog, &QDialog::reject);
  buttons->addWidget(close);
  auto* v = new QVBoxLayout(dialog);
  auto* title = new QLabel(tr("<b>%1</b>, micro-batch %2 × %3 on %4 × %5 GPUs. The texts are what "
                              "<tt>dsplan</tt> writes and prints for this plan; a file that exists "
                              "is replaced only after you confirm.")
                               .arg(QString::fromStdString(PlanSummary(plan.plan)))
                               .arg(plan.plan.micro_batch)
                               .arg(plan.plan.grad_accum)
                               .arg(plan.plan.nodes)
                               .arg(plan.plan.gpus_per_node));
  title->setWordWrap(true);
  v->addWidget(title);
  v->addWidget(explicitForm);
  v->addWidget(hfForm);
  v->addWidget(tabs, 1);
  v->addLayout(buttons);
  return dialog;
}

}  // namespace dsplan::gui

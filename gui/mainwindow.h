// SPDX-License-Identifier: Apache-2.0
// The main window: inputs on the left, the pages in tabs, progress and errors in the window
// (never a crash or a dialog-only message). Owns the PlanService and routes its results to the
// pages; the selected plan is the one state shared by the pages.
#pragma once

#include <QMainWindow>

#include <optional>

#include "planservice.h"

class QDialog;
class QLabel;
class QProgressBar;
class QTabWidget;

namespace dsplan::gui {

class CheckPage;
class InputsPanel;
class MemoryPage;
class PlansPage;
class TimelinePage;
class TradeoffPage;
class ValidationPage;
class WhatIfPage;

/// What File → Export plan… offers for the selected plan, each made by the functions the CLI
/// uses (EmitDsConfig, HfTrainerArgs, LaunchCommand, TorchrunCommand, SrunCommand,
/// HostfileText), so the text equals what `dsplan` prints and writes.
struct ExportTexts {
  QString config;         // ds_config.json, as `dsplan --emit` writes it (dump(2) + "\n")
  QString trainerArgs;    // the HF Trainer arguments, one line
  QString launch;         // launch.sh: HF Trainer, plain DeepSpeed, torchrun (and srun) lines
  QString hostfile;       // empty for one node
};

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);

  PlanService* service() const { return m_service; }
  InputsPanel* inputs() const { return m_inputs; }
  PlansPage* plansPage() const { return m_plans; }
  MemoryPage* memoryPage() const { return m_memory; }
  TimelinePage* timelinePage() const { return m_timeline; }
  WhatIfPage* whatIfPage() const { return m_whatIf; }
  TradeoffPage* tradeoffPage() const { return m_tradeoff; }
  CheckPage* checkPage() const { return m_check; }
  ValidationPage* validationPage() const { return m_validation; }
  QTabWidget* tabs() const { return m_tabs; }
  /// The plan the pages show (empty before a plan is selected).
  const std::optional<ScoredPlan>& selectedPlan() const { return m_selected; }
  /// The message in the window's error line ("" when none).
  QString errorText() const;
  /// Writes the selected plan's ds_config.json to |path| (the CLI's explicit or HF Trainer
  /// form). Returns an error message, or "" on success. An existing file is replaced only
  /// when |replace| (the export dialog asks first).
  QString writeConfig(const QString& path, bool hfAuto, bool replace = false) const;
  /// The selected plan's export texts (empty when none is selected).
  ExportTexts exportTexts(bool hfAuto) const;
  static ExportTexts exportTextsFor(const Plan& plan, bool hfAuto);
  /// Writes |text| to |path| atomically; refuses an existing file unless |replace|. Returns ""
  /// or the error naming the path.
  static QString writeFile(const QString& path, const QString& text, bool replace);
  /// The export dialog for the selected plan (nullptr, with an error shown, when none is);
  /// the caller owns it. exportPlan() runs it modally; the screenshots show it.
  QDialog* createExportDialog();
  /// Shows |message| in the window's error line (failed writes, bad reports).
  void showError(const QString& message);

 public slots:
  void plan();
  void exportConfig(bool hfAuto);
  /// The export dialog: config (both forms), Trainer arguments, launch command, hostfile.
  void exportPlan();

 private:
  void clearError();
  /// Asks for a path to save |text| to (confirming before replacing a file) and writes it.
  void saveWithDialog(QWidget* parent, const QString& title, const QString& name,
                      const QString& text);
  void select(const ScoredPlan& plan);

  PlanService* m_service;
  InputsPanel* m_inputs;
  QTabWidget* m_tabs;
  PlansPage* m_plans;
  MemoryPage* m_memory;
  TimelinePage* m_timeline;
  WhatIfPage* m_whatIf;
  TradeoffPage* m_tradeoff;
  CheckPage* m_check;
  ValidationPage* m_validation;
  QLabel* m_error;
  QLabel* m_status;
  QProgressBar* m_progress;
  std::optional<ScoredPlan> m_selected;
};

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
// The main window: inputs on the left, the pages in tabs, progress and errors in the window
// (never a crash or a dialog-only message). Owns the PlanService and routes its results to the
// pages; the selected plan is the one state shared by the pages.
#pragma once

#include <QMainWindow>

#include <optional>

#include "planservice.h"

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
class WhatIfPage;

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
  QTabWidget* tabs() const { return m_tabs; }
  /// The plan the pages show (empty before a plan is selected).
  const std::optional<ScoredPlan>& selectedPlan() const { return m_selected; }
  /// The message in the window's error line ("" when none).
  QString errorText() const;
  /// Writes the selected plan's ds_config.json to |path| (the CLI's explicit or HF Trainer
  /// form). Returns an error message, or "" on success. Never asks; exportConfig() asks.
  QString writeConfig(const QString& path, bool hfAuto) const;

 public slots:
  void plan();
  void exportConfig(bool hfAuto);

 private:
  void showError(const QString& message);
  void clearError();
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
  QLabel* m_error;
  QLabel* m_status;
  QProgressBar* m_progress;
  std::optional<ScoredPlan> m_selected;
};

}  // namespace dsplan::gui

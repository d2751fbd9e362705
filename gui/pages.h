// SPDX-License-Identifier: Apache-2.0
// The window's pages. Each shows values that arrive from PlanService (through the main
// window) via item models or custom views; none computes a number of its own.
#pragma once

#include <QWidget>

#include "planservice.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QSlider;
class QSpinBox;
class QTableView;
class QListWidget;
class QChartView;
class QChart;

namespace dsplan::gui {

class MemoryBar;
class MemoryBreakdownModel;
class MemoryCompareModel;
class ValidationRowsModel;
struct ValidationData;
class PlansFilterProxy;
class PlansTableModel;
class TimelineModel;
class TimelineWidget;

/// The plans table with a text filter and a "show rejected" toggle.
class PlansPage : public QWidget {
  Q_OBJECT
 public:
  explicit PlansPage(QWidget* parent = nullptr);
  void setReport(const PlanReport& report);
  PlansTableModel* model() const { return m_model; }
  QTableView* view() const { return m_view; }
  /// Selects the recommendation |index| (0 = best) in the view.
  void selectPlan(int index);

 signals:
  void planSelected(int index);

 private:
  PlansTableModel* m_model;
  PlansFilterProxy* m_proxy;
  QTableView* m_view;
  QLabel* m_summary;
  QLabel* m_rowDetail;
  QLineEdit* m_filter;
  QCheckBox* m_showRejected;
};

/// The memory of one plan: the stacked bar at the peak, the table by category, and allocated
/// and reserved memory over the step with the peak and the usable line. A second plan of the
/// table ("Compare with") adds its bar under the first on the same scale and turns the table
/// into both plans by category with the difference.
class MemoryPage : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryPage(QWidget* parent = nullptr);
  /// The plans offered for comparison (the table's recommendations).
  void setReport(const PlanReport& report);
  void setDetail(const StepDetail& detail);
  /// Compares with recommendation |index| (-1: no comparison).
  void compareWith(int index);
  MemoryBar* bar() const { return m_bar; }
  MemoryBar* compareBar() const { return m_barB; }
  MemoryBreakdownModel* model() const { return m_model; }
  MemoryBreakdownModel* compareBreakdown() const { return m_modelB; }
  MemoryCompareModel* compareModel() const { return m_compare; }
  QComboBox* compareBox() const { return m_compareBox; }

 private:
  void updateCompare();

  PlanReport m_report;
  std::optional<Prediction> m_a;
  MemoryBreakdownModel* m_model;
  MemoryBreakdownModel* m_modelB;
  MemoryCompareModel* m_compare;
  MemoryBar* m_bar;
  MemoryBar* m_barB;
  QLabel* m_title;
  QLabel* m_titleB;
  QComboBox* m_compareBox;
  QTableView* m_table;
  QTableView* m_compareTable;
  QChartView* m_chart;
};

/// The Gantt chart and the task list under it (filterable; selecting a task focuses it).
class TimelinePage : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePage(QWidget* parent = nullptr);
  void setDetail(const StepDetail& detail);
  TimelineWidget* gantt() const { return m_gantt; }
  TimelineModel* model() const { return m_model; }

 private:
  TimelineWidget* m_gantt;
  TimelineModel* m_model;
  QLabel* m_title;
  QTableView* m_table;
};

/// Sliders and toggles over the selected plan; every change re-simulates (off the GUI thread)
/// and shows the verdict, the bar against the usable line and the largest micro-batch that fits.
class WhatIfPage : public QWidget {
  Q_OBJECT
 public:
  explicit WhatIfPage(QWidget* parent = nullptr);
  /// The plan the controls start from.
  void setBase(const Plan& plan);
  void setResult(const WhatIfResult& result);
  QSlider* microBatchSlider() const { return m_microBatch; }
  QLabel* verdict() const { return m_verdict; }
  /// The last result's fit, or nullopt before any or on an invalid plan.
  std::optional<bool> fits() const { return m_fits; }
  Plan currentPlan() const;

 signals:
  void simulateRequested(const dsplan::Plan& plan);

 private:
  void changed();

  Plan m_base;
  bool m_loading = false;
  std::optional<bool> m_fits;
  QSlider* m_microBatch;
  QLabel* m_microBatchValue;
  QSlider* m_seqLen;
  QLabel* m_seqLenValue;
  QComboBox* m_stage;
  QComboBox* m_offload;
  QCheckBox* m_checkpointing;
  QLabel* m_verdict;
  QLabel* m_details;
  MemoryBreakdownModel* m_model;
  MemoryBar* m_bar;
};

/// Throughput against peak memory for every fitting plan simulated, the Pareto front drawn on
/// top; clicking a point selects that plan.
class TradeoffPage : public QWidget {
  Q_OBJECT
 public:
  explicit TradeoffPage(QWidget* parent = nullptr);
  void setReport(const PlanReport& report);
  QChart* chart() const;

 signals:
  void planClicked(const dsplan::ScoredPlan& plan);

 private:
  QChartView* m_view;
  PlanReport m_report;
};

/// Open or paste a ds_config.json; the verdict, the predicted memory and speed and the
/// warnings, for the current model and cluster.
class CheckPage : public QWidget {
  Q_OBJECT
 public:
  explicit CheckPage(QWidget* parent = nullptr);
  void setResult(const CheckResult& result);
  void setError(const QString& message);
  QPlainTextEdit* editor() const { return m_editor; }

 signals:
  void checkRequested(const QString& text, const QString& sourceName);

 private:
  QPlainTextEdit* m_editor;
  QLabel* m_verdict;
  QListWidget* m_warnings;
  QString m_source = QStringLiteral("pasted ds_config");
};

/// A `dsplan validate --json` report: measured over predicted for the step time (each measured
/// step against the prediction), the busy time of each task class and the memory rows.
class ValidationPage : public QWidget {
  Q_OBJECT
 public:
  explicit ValidationPage(QWidget* parent = nullptr);
  /// Reads |path|; on error shows it in the page, emits failed() and returns it ("" on success).
  QString open(const QString& path);
  ValidationRowsModel* model() const { return m_model; }
  QChart* classChart() const;
  QChart* memoryChart() const;
  QChart* stepChart() const;
  QLabel* header() const { return m_header; }

 signals:
  void failed(const QString& message);

 private:
  void display(const ValidationData& data);

  ValidationRowsModel* m_model;
  QLabel* m_header;
  QTableView* m_table;
  QChartView* m_classes;
  QChartView* m_memory;
  QChartView* m_steps;
};

}  // namespace dsplan::gui

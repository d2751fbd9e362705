// SPDX-License-Identifier: Apache-2.0
// The plans table: one row per recommended plan (the best of each stage/offload/checkpointing
// choice, best first), then one greyed row per choice where nothing fits, with its reason.
// Roles give views raw numbers (SortRole) and the row's plan (PlanIndexRole); no widgets here.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include "planner/report.h"

namespace dsplan::gui {

class PlansTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    kRank, kStage, kOffload, kCheckpointing, kBatch, kTokensPerSecond, kStepTime, kMfu, kPeak,
    kHeadroom, kHostRam, kBucket, kBottleneck, kNote, kColumnCount
  };
  enum Role {
    SortRole = Qt::UserRole + 1,  // raw number (bytes, seconds, tokens/s) or text
    PlanIndexRole,                // index into PlanReport::recommendations, -1 for a rejected row
    FitsRole,                     // bool
  };

  explicit PlansTableModel(QObject* parent = nullptr);

  void setReport(const PlanReport& report);
  const PlanReport& report() const { return m_report; }
  /// The recommendation at |index| (PlanIndexRole), or nullptr.
  const ScoredPlan* plan(int index) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  struct Row {
    int plan = -1;       // recommendations index, or -1
    int rejected = -1;   // rejected index (the choice's limit, or why nothing fits)
    // A rejected choice's parts, read back from its ChoiceSummary text ("stage 3, offload
    // optimizer->cpu params->cpu, checkpointing"); stage -1 when the text has another form, and
    // then |offload| holds the whole text.
    int stage = -1;
    QString offload;
    QString checkpointing;
  };
  QVariant fitRow(const Row& row, int column, int role) const;
  QVariant rejectedRow(const Row& row, int column, int role) const;

  PlanReport m_report;
  QVector<Row> m_rows;
};

/// Filters the plans table by text (any column) and hides rejected rows on request; sorts by
/// SortRole.
class PlansFilterProxy : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit PlansFilterProxy(QObject* parent = nullptr);
  void setShowRejected(bool show);
  bool showRejected() const { return m_showRejected; }

 protected:
  bool filterAcceptsRow(int row, const QModelIndex& parent) const override;

 private:
  bool m_showRejected = true;
};

}  // namespace dsplan::gui

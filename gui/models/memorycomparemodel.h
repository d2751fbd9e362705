// SPDX-License-Identifier: Apache-2.0
// Two plans' GPU memory at their peaks, category by category, and the difference (B − A); the
// last row is the total (Prediction::gpu_total_bytes of each). No widgets here.
#pragma once

#include <QAbstractTableModel>
#include <QString>

#include "simulator/simulate.h"

namespace dsplan::gui {

class MemoryCompareModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kCategory, kA, kB, kDifference, kColumnCount };
  enum Role {
    SortRole = Qt::UserRole + 1,  // raw bytes (signed for kDifference) or the name
  };
  static constexpr int kTotalRow = kNumMemCategories;

  explicit MemoryCompareModel(QObject* parent = nullptr);
  /// |a| and |b| with their column titles (e.g. "#1 stage 2" and "#3 stage 3").
  void setPlans(const Prediction& a, const QString& nameA, const Prediction& b,
                const QString& nameB);
  void clear();
  bool hasPlans() const { return m_valid; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  int64_t bytes(int row, int column) const;

  CategoryBytes m_a{}, m_b{};
  int64_t m_totalA = 0, m_totalB = 0;
  QString m_nameA, m_nameB;
  bool m_valid = false;
};

}  // namespace dsplan::gui

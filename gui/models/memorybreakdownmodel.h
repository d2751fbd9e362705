// SPDX-License-Identifier: Apache-2.0
// GPU memory by category at the peak instant of one prediction (Prediction::
// gpu_breakdown_at_peak: allocated tensors by category, plus the CUDA context and the caching
// allocator's reserved-minus-allocated). The rows sum to Prediction::gpu_total_bytes.
#pragma once

#include <QAbstractTableModel>
#include <QColor>

#include "simulator/simulate.h"

namespace dsplan::gui {

class MemoryBreakdownModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kCategory, kBytes, kShare, kColumnCount };
  enum Role {
    SortRole = Qt::UserRole + 1,  // raw bytes (kBytes, kShare) or the name
    BytesRole,                    // qlonglong bytes of the row, any column
    CategoryRole,                 // int MemCategory
  };

  explicit MemoryBreakdownModel(QObject* parent = nullptr);

  void setPrediction(const Prediction& prediction);
  void clear();
  /// Sum of the rows (== the prediction's gpu_total_bytes when the breakdown is complete).
  qint64 totalBytes() const;
  /// The colour views use for |category| (also Qt::DecorationRole).
  static QColor categoryColor(int category);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  CategoryBytes m_bytes{};
  bool m_valid = false;
};

}  // namespace dsplan::gui

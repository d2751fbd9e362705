// SPDX-License-Identifier: Apache-2.0
#include "models/memorycomparemodel.h"

#include <QColor>
#include <QFont>

#include "models/format.h"
#include "models/memorybreakdownmodel.h"

namespace dsplan::gui {

MemoryCompareModel::MemoryCompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void MemoryCompareModel::setPlans(const Prediction& a, const QString& nameA, const Prediction& b,
                                  const QString& nameB) {
  beginResetModel();
  m_a = a.gpu_breakdown_at_peak;
  m_b = b.gpu_breakdown_at_peak;
  m_totalA = a.gpu_total_bytes;
  m_totalB = b.gpu_total_bytes;
  m_nameA = nameA;
  m_nameB = nameB;
  m_valid = true;
  endResetModel();
}

void MemoryCompareModel::clear() {
  beginResetModel();
  m_valid = false;
  m_a = {};
  m_b = {};
  m_totalA = m_totalB = 0;
  endResetModel();
}

int MemoryCompareModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !m_valid ? 0 : kNumMemCategories + 1;
}

int MemoryCompareModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant MemoryCompareModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::DisplayRole) {
    switch (section) {
      case kCategory: return QStringLiteral("Category");
      case kA: return QStringLiteral("A");
      case kB: return QStringLiteral("B");
      case kDifference: return QStringLiteral("B − A");
    }
  }
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case kA: return m_nameA;
      case kB: return m_nameB;
      case kDifference: return QStringLiteral("What B needs more (+) or less (−) than A at its peak");
    }
  }
  return {};
}

int64_t MemoryCompareModel::bytes(int row, int column) const {
  const int64_t a = row == kTotalRow ? m_totalA : m_a[row];
  const int64_t b = row == kTotalRow ? m_totalB : m_b[row];
  return column == kA ? a : column == kB ? b : b - a;
}

QVariant MemoryCompareModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !m_valid || index.row() > kTotalRow || index.column() >= kColumnCount) {
    return {};
  }
  const int row = index.row();
  const int col = index.column();
  if (role == Qt::DecorationRole && col == kCategory && row < kTotalRow) {
    return MemoryBreakdownModel::categoryColor(row);
  }
  if (role == Qt::TextAlignmentRole && col != kCategory) {
    return QVariant::fromValue<int>(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::FontRole && row == kTotalRow) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role == Qt::ForegroundRole && col == kDifference) {
    const int64_t d = bytes(row, col);
    if (d > 0) return QColor(180, 0, 0);   // B needs more
    if (d < 0) return QColor(0, 120, 0);   // B needs less
  }
  if (role == Qt::DisplayRole) {
    if (col == kCategory) {
      return row == kTotalRow ? QStringLiteral("total (reserved + context)")
                              : QString::fromUtf8(MemCategoryName(static_cast<MemCategory>(row)));
    }
    const int64_t b = bytes(row, col);
    if (col == kDifference) {
      if (b == 0) return QStringLiteral("0");
      return (b > 0 ? QStringLiteral("+") : QStringLiteral("−")) +
             formatBytes(static_cast<double>(b > 0 ? b : -b));
    }
    return formatBytes(static_cast<double>(b));
  }
  if (role == SortRole) {
    if (col == kCategory) return row;
    return static_cast<qlonglong>(bytes(row, col));
  }
  return {};
}

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
#include "models/memorybreakdownmodel.h"

#include "models/format.h"

namespace dsplan::gui {

MemoryBreakdownModel::MemoryBreakdownModel(QObject* parent) : QAbstractTableModel(parent) {}

void MemoryBreakdownModel::setPrediction(const Prediction& p) {
  beginResetModel();
  m_bytes = p.gpu_breakdown_at_peak;
  m_valid = true;
  endResetModel();
}

void MemoryBreakdownModel::clear() {
  beginResetModel();
  m_bytes = {};
  m_valid = false;
  endResetModel();
}

qint64 MemoryBreakdownModel::totalBytes() const {
  qint64 t = 0;
  for (int64_t b : m_bytes) t += b;
  return t;
}

QColor MemoryBreakdownModel::categoryColor(int c) {
  // One hue per category, model states in blues/greens, transient memory in warm colours,
  // fixed costs in greys.
  static const QColor kColors[kNumMemCategories] = {
      QColor(0x1f, 0x77, 0xb4),  // params 16-bit
      QColor(0x6b, 0xae, 0xd6),  // gathered params
      QColor(0x2c, 0xa0, 0x2c),  // gradients
      QColor(0x98, 0xdf, 0x8a),  // fp32 master
      QColor(0x17, 0xbe, 0xcf),  // optimizer states
      QColor(0x94, 0x67, 0xbd),  // comm buffers
      QColor(0xff, 0x7f, 0x0e),  // activations
      QColor(0xd6, 0x27, 0x28),  // temporaries
      QColor(0x7f, 0x7f, 0x7f),  // CUDA context
      QColor(0xc7, 0xc7, 0xc7),  // allocator overhead
  };
  return c >= 0 && c < kNumMemCategories ? kColors[c] : QColor(Qt::black);
}

int MemoryBreakdownModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !m_valid ? 0 : kNumMemCategories;
}

int MemoryBreakdownModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant MemoryBreakdownModel::headerData(int section, Qt::Orientation orientation,
                                          int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kCategory: return QStringLiteral("Category");
    case kBytes: return QStringLiteral("At peak");
    case kShare: return QStringLiteral("Share");
  }
  return {};
}

QVariant MemoryBreakdownModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !m_valid || index.row() >= kNumMemCategories ||
      index.column() >= kColumnCount) {
    return {};
  }
  const int c = index.row();
  const double bytes = static_cast<double>(m_bytes[c]);
  const double total = static_cast<double>(totalBytes());
  if (role == BytesRole) return static_cast<qlonglong>(m_bytes[c]);
  if (role == CategoryRole) return c;
  if (role == Qt::DecorationRole && index.column() == kCategory) return categoryColor(c);
  if (role == Qt::TextAlignmentRole && index.column() != kCategory) {
    return QVariant::fromValue<int>(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kCategory: return QString::fromUtf8(MemCategoryName(static_cast<MemCategory>(c)));
      case kBytes: return formatBytes(bytes);
      case kShare: return QStringLiteral("%1 %").arg(total > 0 ? 100 * bytes / total : 0.0, 0, 'f', 1);
    }
  }
  if (role == SortRole) {
    if (index.column() == kCategory) return QString::fromUtf8(MemCategoryName(static_cast<MemCategory>(c)));
    return static_cast<qlonglong>(m_bytes[c]);
  }
  return {};
}

}  // namespace dsplan::gui

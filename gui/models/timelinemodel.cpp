// SPDX-License-Identifier: Apache-2.0
#include "models/timelinemodel.h"

#include "models/format.h"

namespace dsplan::gui {

TimelineModel::TimelineModel(QObject* parent) : QAbstractTableModel(parent) {}

void TimelineModel::setTasks(const std::vector<TimelineTask>& tasks) {
  beginResetModel();
  m_tasks = tasks;
  endResetModel();
}

int TimelineModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_tasks.size());
}

int TimelineModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant TimelineModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kResource: return QStringLiteral("Resource");
    case kName: return QStringLiteral("Task");
    case kStart: return QStringLiteral("Start");
    case kDuration: return QStringLiteral("Duration");
    case kBytes: return QStringLiteral("Bytes");
  }
  return {};
}

QVariant TimelineModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= static_cast<int>(m_tasks.size()) ||
      index.column() >= kColumnCount) {
    return {};
  }
  const TimelineTask& t = m_tasks[static_cast<size_t>(index.row())];
  if (role == TaskRole) return index.row();
  if (role == Qt::TextAlignmentRole && index.column() >= kStart) {
    return QVariant::fromValue<int>(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kResource: return QString::fromUtf8(ResourceName(t.resource));
      case kName: return QString::fromStdString(t.name);
      case kStart: return formatSeconds(t.start_s);
      case kDuration: return formatSeconds(t.end_s - t.start_s);
      case kBytes: return t.bytes > 0 ? formatBytes(t.bytes) : QString();
    }
  }
  if (role == SortRole) {
    switch (index.column()) {
      case kResource: return static_cast<int>(t.resource);
      case kName: return QString::fromStdString(t.name);
      case kStart: return t.start_s;
      case kDuration: return t.end_s - t.start_s;
      case kBytes: return t.bytes;
    }
  }
  return {};
}

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
// The tasks of one simulated step (StepDetail::tasks) as a table: resource, name, start,
// duration, bytes. The Gantt view reads StepDetail directly; this model backs the task list
// and its filter.
#pragma once

#include <QAbstractTableModel>

#include "planner/report.h"

namespace dsplan::gui {

class TimelineModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kResource, kName, kStart, kDuration, kBytes, kColumnCount };
  enum Role {
    SortRole = Qt::UserRole + 1,  // raw seconds / bytes / text
    TaskRole,                     // int task id
  };

  explicit TimelineModel(QObject* parent = nullptr);
  void setTasks(const std::vector<TimelineTask>& tasks);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<TimelineTask> m_tasks;
};

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
// The simulated step as a Gantt chart: one lane per resource (compute, communication, H2D, D2H,
// CPU, NVMe), tasks coloured by kind. Wheel zooms around the cursor, dragging pans, a double
// click shows the whole step; hovering a task shows its name, duration and bytes. Reads the
// StepDetail value directly (hotspot's flame graph reads its results the same way).
#pragma once

#include <QWidget>

#include "planner/report.h"

namespace dsplan::gui {

class TimelineWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineWidget(QWidget* parent = nullptr);
  void setDetail(const StepDetail& detail);
  void clear();
  /// The visible time range, seconds.
  void setRange(double t0, double t1);
  double rangeStart() const { return m_t0; }
  double rangeEnd() const { return m_t1; }
  /// The step-time band drawn after the step's end (seconds; 0 when none).
  double bandLow() const { return m_bandLow; }
  double bandHigh() const { return m_bandHigh; }
  /// Shows the whole step and its band.
  void resetZoom();
  /// Centres and highlights task |id|.
  void focusTask(int id);
  /// The task under |pos| (widget coordinates), or -1.
  int taskAt(QPointF pos) const;
  static QColor kindColor(TaskKind kind);

  QSize sizeHint() const override { return {900, 300}; }
  QSize minimumSizeHint() const override { return {400, 220}; }

 signals:
  void rangeChanged(double t0, double t1);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF plotRect() const;
  double xOf(double t) const;
  double tOf(double x) const;
  QRectF laneRect(int lane) const;

  std::vector<TimelineTask> m_tasks;
  double m_makespan = 0;
  // The step-time band (seconds): measured steps are expected to end between these.
  double m_bandLow = 0, m_bandHigh = 0;
  double total() const;
  double m_t0 = 0, m_t1 = 1;
  int m_highlight = -1;
  bool m_dragging = false;
  double m_dragX = 0, m_dragT0 = 0, m_dragT1 = 0;
};

}  // namespace dsplan::gui

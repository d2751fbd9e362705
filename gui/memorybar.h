// SPDX-License-Identifier: Apache-2.0
// A horizontal stacked bar of GPU memory by category at the peak instant, drawn from a
// MemoryBreakdownModel, against the device capacity and the usable line the planner judges fit
// by. Segments wide enough carry their name and size; hover shows any segment.
#pragma once

#include <QWidget>

namespace dsplan::gui {

class MemoryBreakdownModel;

class MemoryBar : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryBar(QWidget* parent = nullptr);
  void setModel(MemoryBreakdownModel* model);
  /// Device memory and the usable limit (capacity x fraction x (1 - margin)), bytes.
  void setLimits(double capacityBytes, double usableBytes);
  /// Draw to this many bytes across (0: the larger of the capacity and the total), so that
  /// two bars side by side share one scale.
  void setScaleBytes(double bytes);
  /// The sum of the drawn segments, bytes.
  qint64 totalBytes() const;
  QSize sizeHint() const override { return {600, 96}; }
  QSize minimumSizeHint() const override { return {300, 96}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF barRect() const;
  double scaleMax() const;
  int segmentAt(QPointF pos) const;

  MemoryBreakdownModel* m_model = nullptr;
  double m_capacity = 0;
  double m_usable = 0;
  double m_scaleBytes = 0;
};

}  // namespace dsplan::gui

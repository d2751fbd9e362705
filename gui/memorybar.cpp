// SPDX-License-Identifier: Apache-2.0
#include "memorybar.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>

#include "models/format.h"
#include "models/memorybreakdownmodel.h"

namespace dsplan::gui {

MemoryBar::MemoryBar(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

void MemoryBar::setModel(MemoryBreakdownModel* model) {
  m_model = model;
  connect(model, &QAbstractItemModel::modelReset, this, qOverload<>(&QWidget::update));
  update();
}

void MemoryBar::setLimits(double capacityBytes, double usableBytes) {
  m_capacity = capacityBytes;
  m_usable = usableBytes;
  update();
}

void MemoryBar::setScaleBytes(double bytes) {
  m_scaleBytes = bytes;
  update();
}

qint64 MemoryBar::totalBytes() const {
  if (!m_model) return 0;
  qint64 t = 0;
  for (int r = 0; r < m_model->rowCount(); ++r) {
    t += m_model->index(r, 0).data(MemoryBreakdownModel::BytesRole).toLongLong();
  }
  return t;
}

QRectF MemoryBar::barRect() const { return QRectF(8, 22, width() - 16, 36); }

double MemoryBar::scaleMax() const {
  return std::max({m_capacity, static_cast<double>(totalBytes()), m_scaleBytes, 1.0}) * 1.02;
}

int MemoryBar::segmentAt(QPointF pos) const {
  if (!m_model || !barRect().contains(pos)) return -1;
  const QRectF bar = barRect();
  const double scale = bar.width() / scaleMax();
  double x = bar.left();
  for (int r = 0; r < m_model->rowCount(); ++r) {
    const double w = m_model->index(r, 0).data(MemoryBreakdownModel::BytesRole).toLongLong() * scale;
    if (pos.x() >= x && pos.x() < x + w) return r;
    x += w;
  }
  return -1;
}

bool MemoryBar::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int r = segmentAt(he->pos());
    if (r >= 0) {
      QToolTip::showText(he->globalPos(),
                         QStringLiteral("%1: %2 (%3)")
                             .arg(m_model->index(r, MemoryBreakdownModel::kCategory).data().toString(),
                                  m_model->index(r, MemoryBreakdownModel::kBytes).data().toString(),
                                  m_model->index(r, MemoryBreakdownModel::kShare).data().toString()),
                         this);
    } else {
      QToolTip::hideText();
      e->ignore();
    }
    return true;
  }
  return QWidget::event(e);
}

void MemoryBar::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QRectF bar = barRect();
  p.fillRect(rect(), palette().base());
  p.setPen(QColor(200, 200, 200));
  p.setBrush(QColor(245, 245, 245));
  p.drawRect(bar);
  if (!m_model || m_model->rowCount() == 0) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(bar, Qt::AlignCenter, tr("no plan selected"));
    return;
  }
  const double scale = bar.width() / scaleMax();
  double x = bar.left();
  const QFontMetrics fm(font());
  for (int r = 0; r < m_model->rowCount(); ++r) {
    const qint64 b = m_model->index(r, 0).data(MemoryBreakdownModel::BytesRole).toLongLong();
    if (b <= 0) continue;
    const QRectF seg(x, bar.top(), b * scale, bar.height());
    const QColor c = MemoryBreakdownModel::categoryColor(
        m_model->index(r, 0).data(MemoryBreakdownModel::CategoryRole).toInt());
    p.setPen(Qt::white);
    p.setBrush(c);
    p.drawRect(seg);
    const QString label = m_model->index(r, MemoryBreakdownModel::kCategory).data().toString();
    const QString size = m_model->index(r, MemoryBreakdownModel::kBytes).data().toString();
    p.setPen(c.lightness() > 150 ? Qt::black : Qt::white);
    if (fm.horizontalAdvance(label) + 6 < seg.width()) {
      p.drawText(seg.adjusted(3, 2, -3, -seg.height() / 2), Qt::AlignLeft | Qt::AlignVCenter, label);
      p.drawText(seg.adjusted(3, seg.height() / 2, -3, -2), Qt::AlignLeft | Qt::AlignVCenter, size);
    } else if (fm.horizontalAdvance(size) + 4 < seg.width()) {
      p.drawText(seg, Qt::AlignCenter, size);
    }
    x += seg.width();
  }
  // Total above the bar's end; capacity and usable lines with their labels.
  p.setPen(palette().color(QPalette::Text));
  const QString total = tr("peak %1").arg(formatBytes(static_cast<double>(totalBytes())));
  p.drawText(QRectF(bar.left(), 2, bar.width(), 18), Qt::AlignLeft | Qt::AlignVCenter, total);
  auto marker = [&](double bytes, const QColor& color, const QString& text, bool below) {
    if (bytes <= 0) return;
    const double mx = bar.left() + bytes * scale;
    p.setPen(QPen(color, 2, Qt::DashLine));
    p.drawLine(QPointF(mx, bar.top() - 4), QPointF(mx, bar.bottom() + 4));
    p.setPen(color);
    const double w = fm.horizontalAdvance(text) + 4;
    const double tx = std::max(0.0, std::min(mx - w, width() - w));
    p.drawText(QRectF(tx, below ? bar.bottom() + 4 : 2, w, 18), Qt::AlignRight | Qt::AlignVCenter, text);
  };
  marker(m_capacity, QColor(60, 60, 60), tr("capacity %1").arg(formatBytes(m_capacity)), false);
  marker(m_usable, QColor(200, 0, 0), tr("usable %1").arg(formatBytes(m_usable)), true);
}

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
#include "timelinewidget.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

#include "models/format.h"

namespace dsplan::gui {
namespace {
constexpr double kLabelWidth = 110;
constexpr double kAxisHeight = 28;
constexpr double kLegendHeight = 24;
}  // namespace

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

QColor TimelineWidget::kindColor(TaskKind k) {
  switch (k) {
    case TaskKind::kForward: return QColor(0x4e, 0x79, 0xa7);
    case TaskKind::kRecompute: return QColor(0x9c, 0xc4, 0xe4);
    case TaskKind::kBackward: return QColor(0xf2, 0x8e, 0x2b);
    case TaskKind::kGradCopy: return QColor(0xed, 0xc9, 0x48);
    case TaskKind::kAllReduce:
    case TaskKind::kReduceScatter:
    case TaskKind::kAllGather: return QColor(0x59, 0xa1, 0x4f);
    case TaskKind::kCopyD2H:
    case TaskKind::kCopyH2D: return QColor(0xb0, 0x7a, 0xa1);
    case TaskKind::kGpuOptimizer:
    case TaskKind::kCpuOptimizer: return QColor(0xe1, 0x57, 0x59);
    case TaskKind::kNvmeRead:
    case TaskKind::kNvmeWrite: return QColor(0x9c, 0x75, 0x5f);
  }
  return Qt::gray;
}

void TimelineWidget::setDetail(const StepDetail& d) {
  m_tasks = d.tasks;
  m_makespan = 0;
  for (const TimelineTask& t : m_tasks) m_makespan = std::max(m_makespan, t.end_s);
  const Prediction& pred = d.prediction;
  m_bandLow = pred.time_band.low * pred.step_time_s;
  m_bandHigh = pred.time_band.high * pred.step_time_s;
  m_highlight = -1;
  resetZoom();
}

double TimelineWidget::total() const {
  const double t = std::max(m_makespan, m_bandHigh);
  return t > 0 ? t : 1;
}

void TimelineWidget::clear() {
  m_tasks.clear();
  m_makespan = 0;
  m_bandLow = m_bandHigh = 0;
  m_highlight = -1;
  resetZoom();
}

void TimelineWidget::resetZoom() { setRange(0, total()); }

void TimelineWidget::setRange(double t0, double t1) {
  const double minSpan = 1e-7;
  if (t1 - t0 < minSpan) t1 = t0 + minSpan;
  const double all = total();
  const double span = std::min(t1 - t0, all * 1.05);
  t0 = std::clamp(t0, -0.025 * all, all * 1.025 - span);
  m_t0 = t0;
  m_t1 = t0 + span;
  update();
  emit rangeChanged(m_t0, m_t1);
}

void TimelineWidget::focusTask(int id) {
  if (id < 0 || id >= static_cast<int>(m_tasks.size())) return;
  m_highlight = id;
  const TimelineTask& t = m_tasks[static_cast<size_t>(id)];
  const double span = std::max((t.end_s - t.start_s) * 20, (m_t1 - m_t0) * 0.05);
  const double mid = 0.5 * (t.start_s + t.end_s);
  setRange(mid - span / 2, mid + span / 2);
}

QRectF TimelineWidget::plotRect() const {
  return QRectF(kLabelWidth, kAxisHeight, width() - kLabelWidth - 8,
                height() - kAxisHeight - kLegendHeight - 4);
}

QRectF TimelineWidget::laneRect(int lane) const {
  const QRectF p = plotRect();
  const double h = p.height() / kNumResources;
  return QRectF(p.left(), p.top() + lane * h, p.width(), h);
}

double TimelineWidget::xOf(double t) const {
  const QRectF p = plotRect();
  return p.left() + (t - m_t0) / (m_t1 - m_t0) * p.width();
}

double TimelineWidget::tOf(double x) const {
  const QRectF p = plotRect();
  return m_t0 + (x - p.left()) / p.width() * (m_t1 - m_t0);
}

int TimelineWidget::taskAt(QPointF pos) const {
  if (!plotRect().contains(pos)) return -1;
  const double t = tOf(pos.x());
  const double slack = (m_t1 - m_t0) / plotRect().width() * 2;  // 2 px
  int best = -1;
  double bestDist = slack;
  for (int i = 0; i < static_cast<int>(m_tasks.size()); ++i) {
    const TimelineTask& k = m_tasks[static_cast<size_t>(i)];
    if (!laneRect(static_cast<int>(k.resource)).contains(pos)) continue;
    const double dist = t < k.start_s ? k.start_s - t : (t > k.end_s ? t - k.end_s : 0);
    if (dist <= bestDist) {
      bestDist = dist;
      best = i;
      if (dist == 0) break;
    }
  }
  return best;
}

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  const QRectF plot = plotRect();
  const QFontMetrics fm(font());
  // Lanes.
  for (int r = 0; r < kNumResources; ++r) {
    const QRectF lane = laneRect(r);
    p.fillRect(lane, r % 2 ? QColor(248, 248, 248) : QColor(238, 241, 245));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(4, lane.top(), kLabelWidth - 8, lane.height()), Qt::AlignRight | Qt::AlignVCenter,
               QString::fromUtf8(ResourceName(static_cast<Resource>(r))));
  }
  // Time axis: ~8 ticks at a round step.
  const double span = m_t1 - m_t0;
  const double raw = span / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  p.setPen(QColor(120, 120, 120));
  for (double t = std::ceil(m_t0 / step) * step; t <= m_t1; t += step) {
    const double x = xOf(t);
    p.setPen(QColor(215, 215, 215));
    p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
    p.setPen(palette().color(QPalette::Text));
    const QString label = formatSeconds(std::abs(t) < step * 1e-6 ? 0.0 : t);
    p.drawText(QRectF(x - 50, 4, 100, kAxisHeight - 8), Qt::AlignCenter, label);
  }
  if (m_tasks.empty()) {
    p.drawText(plot, Qt::AlignCenter, tr("no plan selected"));
    return;
  }
  // The step-time band: where measured steps are expected to end (StepTimeBand), and the
  // predicted end.
  p.setClipRect(plot);
  const QColor bandColor(140, 90, 200, 45);
  if (m_bandHigh > m_bandLow) {
    p.fillRect(QRectF(QPointF(xOf(m_bandLow), plot.top()), QPointF(xOf(m_bandHigh), plot.bottom())),
               bandColor);
    p.setPen(QPen(QColor(110, 60, 170), 1.5, Qt::DashLine));
    p.drawLine(QPointF(xOf(m_makespan), plot.top()), QPointF(xOf(m_makespan), plot.bottom()));
  }
  // Tasks.
  for (int i = 0; i < static_cast<int>(m_tasks.size()); ++i) {
    const TimelineTask& k = m_tasks[static_cast<size_t>(i)];
    if (k.end_s < m_t0 || k.start_s > m_t1) continue;
    const QRectF lane = laneRect(static_cast<int>(k.resource));
    const double x0 = xOf(k.start_s), x1 = xOf(k.end_s);
    QRectF box(x0, lane.top() + 4, std::max(1.0, x1 - x0), lane.height() - 8);
    const QColor c = kindColor(k.kind);
    p.fillRect(box, c);
    if (i == m_highlight) {
      p.setPen(QPen(Qt::black, 2));
      p.drawRect(box);
    } else if (box.width() > 3) {
      p.setPen(c.darker(130));
      p.drawRect(box);
    }
    const QRectF shown = box.intersected(plot);
    if (shown.width() > 28) {
      // The name without its micro-step suffix when the whole does not fit, elided if needed.
      QString name = QString::fromStdString(k.name);
      if (fm.horizontalAdvance(name) + 6 > shown.width()) {
        const int cut = name.indexOf(QStringLiteral(" (micro-step"));
        if (cut > 0) name.truncate(cut);
      }
      name = fm.elidedText(name, Qt::ElideRight, static_cast<int>(shown.width() - 6));
      p.setPen(c.lightness() > 150 ? Qt::black : Qt::white);
      p.drawText(shown.adjusted(3, 0, -3, 0), Qt::AlignLeft | Qt::AlignVCenter, name);
    }
  }
  p.setClipping(false);
  // Legend.
  struct Item { const char* name; TaskKind kind; };
  const Item items[] = {{"forward", TaskKind::kForward},     {"recompute", TaskKind::kRecompute},
                        {"backward", TaskKind::kBackward},   {"grad copy", TaskKind::kGradCopy},
                        {"collective", TaskKind::kAllReduce}, {"PCIe copy", TaskKind::kCopyH2D},
                        {"optimizer", TaskKind::kGpuOptimizer}, {"NVMe", TaskKind::kNvmeRead}};
  double lx = plot.left();
  const double ly = plot.bottom() + 6;
  for (const Item& it : items) {
    p.fillRect(QRectF(lx, ly + 3, 12, 12), kindColor(it.kind));
    p.setPen(palette().color(QPalette::Text));
    const QString n = QString::fromUtf8(it.name);
    p.drawText(QRectF(lx + 16, ly, fm.horizontalAdvance(n) + 4, 18), Qt::AlignLeft | Qt::AlignVCenter, n);
    lx += 16 + fm.horizontalAdvance(n) + 16;
  }
  if (m_bandHigh > m_bandLow) {
    p.fillRect(QRectF(lx, ly + 3, 12, 12), QColor(140, 90, 200, 90));
    const QString n = tr("step-time band");
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(lx + 16, ly, fm.horizontalAdvance(n) + 4, 18), Qt::AlignLeft | Qt::AlignVCenter, n);
  }
}

void TimelineWidget::wheelEvent(QWheelEvent* e) {
  const double factor = std::pow(0.8, e->angleDelta().y() / 120.0);
  const double t = tOf(e->position().x());
  setRange(t - (t - m_t0) * factor, t + (m_t1 - t) * factor);
  e->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    m_dragging = true;
    m_dragX = e->position().x();
    m_dragT0 = m_t0;
    m_dragT1 = m_t1;
    setCursor(Qt::ClosedHandCursor);
  }
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* e) {
  if (!m_dragging) return;
  const double dt = (e->position().x() - m_dragX) / plotRect().width() * (m_dragT1 - m_dragT0);
  setRange(m_dragT0 - dt, m_dragT1 - dt);
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent*) {
  m_dragging = false;
  unsetCursor();
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent*) { resetZoom(); }

bool TimelineWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int id = taskAt(he->pos());
    if (id >= 0) {
      const TimelineTask& k = m_tasks[static_cast<size_t>(id)];
      QString tip = QStringLiteral("<b>%1</b><br>%2, %3 → %4<br>duration %5")
                        .arg(QString::fromStdString(k.name).toHtmlEscaped(),
                             QString::fromUtf8(ResourceName(k.resource)), formatSeconds(k.start_s),
                             formatSeconds(k.end_s), formatSeconds(k.end_s - k.start_s));
      if (k.bytes > 0) tip += QStringLiteral("<br>bytes %1").arg(formatBytes(k.bytes));
      if (k.flops > 0) tip += QStringLiteral("<br>%1 GFLOP").arg(k.flops / 1e9, 0, 'f', 1);
      QToolTip::showText(he->globalPos(), tip, this);
    } else {
      QToolTip::hideText();
      e->ignore();
    }
    return true;
  }
  return QWidget::event(e);
}

}  // namespace dsplan::gui

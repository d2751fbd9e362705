// SPDX-License-Identifier: Apache-2.0
#include "pages.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <algorithm>
#include <cmath>

#include "memorybar.h"
#include "models/format.h"
#include "models/memorybreakdownmodel.h"
#include "models/planstablemodel.h"
#include "models/timelinemodel.h"
#include "timelinewidget.h"

namespace dsplan::gui {
namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

QTableView* makeTable(QAbstractItemModel* model, int sortRole) {
  auto* proxy = new QSortFilterProxyModel(model);
  proxy->setSourceModel(model);
  proxy->setSortRole(sortRole);
  auto* v = new QTableView;
  v->setModel(proxy);
  v->setSortingEnabled(true);
  v->sortByColumn(-1, Qt::AscendingOrder);
  v->setSelectionBehavior(QAbstractItemView::SelectRows);
  v->setSelectionMode(QAbstractItemView::SingleSelection);
  v->verticalHeader()->hide();
  v->verticalHeader()->setDefaultSectionSize(22);
  v->horizontalHeader()->setStretchLastSection(true);
  v->setAlternatingRowColors(true);
  return v;
}
}  // namespace

// ---------------------------------------------------------------- Plans

PlansPage::PlansPage(QWidget* parent) : QWidget(parent) {
  m_model = new PlansTableModel(this);
  m_proxy = new PlansFilterProxy(this);
  m_proxy->setSourceModel(m_model);
  m_view = new QTableView;
  m_view->setObjectName(QStringLiteral("plansTable"));
  m_view->setModel(m_proxy);
  m_view->setSortingEnabled(true);
  m_view->sortByColumn(PlansTableModel::kRank, Qt::AscendingOrder);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setSelectionMode(QAbstractItemView::SingleSelection);
  m_view->verticalHeader()->hide();
  m_view->verticalHeader()->setDefaultSectionSize(22);
  m_view->horizontalHeader()->setStretchLastSection(true);
  m_view->setAlternatingRowColors(true);
  m_view->setWordWrap(false);
  m_summary = new QLabel(tr("Pick a model and a cluster, then Plan."));
  m_summary->setWordWrap(true);
  m_filter = new QLineEdit;
  m_filter->setPlaceholderText(tr("Filter (any column, e.g. \"stage 3\" or \"cpu\")"));
  m_filter->setClearButtonEnabled(true);
  connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
  m_showRejected = new QCheckBox(tr("show choices that do not fit"));
  m_showRejected->setChecked(true);
  connect(m_showRejected, &QCheckBox::toggled, m_proxy, &PlansFilterProxy::setShowRejected);
  auto* top = new QHBoxLayout;
  top->addWidget(m_filter, 1);
  top->addWidget(m_showRejected);
  auto* v = new QVBoxLayout(this);
  v->addWidget(m_summary);
  v->addLayout(top);
  v->addWidget(m_view, 1);
  m_rowDetail = new QLabel;
  m_rowDetail->setWordWrap(true);
  m_rowDetail->setTextFormat(Qt::PlainText);
  m_rowDetail->setTextInteractionFlags(Qt::TextSelectableByMouse);
  v->addWidget(m_rowDetail);
  connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            // The row's whole story (plan, where its peak is, its limit or why nothing fits),
            // which the table's last column holds but the window may be too narrow to show.
            m_rowDetail->setText(current.siblingAtColumn(0).data(Qt::ToolTipRole).toString());
            const int idx = current.siblingAtColumn(0).data(PlansTableModel::PlanIndexRole).toInt();
            if (current.isValid() && idx >= 0) emit planSelected(idx);
          });
}

void PlansPage::setReport(const PlanReport& r) {
  m_model->setReport(r);
  const QString fits = r.recommendations.empty()
                           ? tr("<b style='color:#c00'>No plan fits.</b> The greyed rows say why.")
                           : tr("%1 choices fit; best first.").arg(r.recommendations.size());
  m_summary->setText(
      tr("<b>%1</b> (%2 B parameters) on %3 × %4 GPUs, %5 (%6); sequence %7%8. %9 "
         "%10 plans considered, %11 simulated in %12 s.")
          .arg(QString::fromStdString(r.model_name))
          .arg(r.params / 1e9, 0, 'f', 2)
          .arg(r.nodes)
          .arg(r.gpus_per_node)
          .arg(QString::fromStdString(r.profile_name), QString::fromStdString(r.profile_sources))
          .arg(r.seq_len)
          .arg(r.target_len > 0 ? tr(" + target %1").arg(r.target_len) : QString())
          .arg(fits)
          .arg(r.plans_considered)
          .arg(r.plans_simulated)
          .arg(r.seconds, 0, 'f', 2));
  m_view->resizeColumnsToContents();
  m_view->horizontalHeader()->resizeSection(PlansTableModel::kOffload,
                                            std::min(m_view->columnWidth(PlansTableModel::kOffload), 170));
}

void PlansPage::selectPlan(int index) {
  for (int r = 0; r < m_proxy->rowCount(); ++r) {
    const QModelIndex i = m_proxy->index(r, 0);
    if (i.data(PlansTableModel::PlanIndexRole).toInt() == index) {
      m_view->setCurrentIndex(i);
      m_view->scrollTo(i);
      return;
    }
  }
}

// ---------------------------------------------------------------- Memory

MemoryPage::MemoryPage(QWidget* parent) : QWidget(parent) {
  m_model = new MemoryBreakdownModel(this);
  m_bar = new MemoryBar;
  m_bar->setObjectName(QStringLiteral("memoryBar"));
  m_bar->setModel(m_model);
  m_title = new QLabel(tr("Select a plan."));
  m_title->setWordWrap(true);
  m_table = makeTable(m_model, MemoryBreakdownModel::SortRole);
  m_table->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_table->setMinimumWidth(390);
  m_table->setMaximumWidth(420);
  auto* chart = new QChart;
  chart->setTitle(tr("GPU memory over the step"));
  chart->legend()->setAlignment(Qt::AlignBottom);
  m_chart = new QChartView(chart);
  m_chart->setRenderHint(QPainter::Antialiasing);
  auto* h = new QHBoxLayout;
  h->addWidget(m_table);
  h->addWidget(m_chart, 1);
  auto* v = new QVBoxLayout(this);
  v->addWidget(m_title);
  v->addWidget(m_bar);
  v->addLayout(h, 1);
}

void MemoryPage::setDetail(const StepDetail& d) {
  const Prediction& p = d.prediction;
  m_model->setPrediction(p);
  m_bar->setLimits(static_cast<double>(p.gpu_capacity_bytes), d.usable_gpu_bytes);
  m_title->setText(tr("<b>%1</b>, micro-batch %2 × %3. Peak per GPU %4 (reserved %5 + CUDA "
                      "context %6; allocated %7) at <i>%8</i>; %9.")
                       .arg(QString::fromStdString(PlanSummary(p.plan)))
                       .arg(p.plan.micro_batch)
                       .arg(p.plan.grad_accum)
                       .arg(formatBytes(static_cast<double>(p.gpu_total_bytes)),
                            formatBytes(static_cast<double>(p.gpu_peak_reserved_bytes)),
                            formatBytes(static_cast<double>(p.gpu_context_bytes)),
                            formatBytes(static_cast<double>(p.gpu_peak_allocated_bytes)),
                            QString::fromStdString(p.gpu_peak_task).toHtmlEscaped(),
                            p.fits ? tr("<span style='color:#080'>fits</span>")
                                   : tr("<span style='color:#c00'>does not fit: %1</span>")
                                         .arg(QString::fromStdString(p.reason).toHtmlEscaped())));
  m_table->resizeColumnsToContents();
  m_table->setColumnWidth(MemoryBreakdownModel::kCategory, 215);
  QChart* chart = m_chart->chart();
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
  std::vector<MemorySample> samples = d.memory;
  std::stable_sort(samples.begin(), samples.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.time_s < b.time_s; });
  auto* alloc = new QLineSeries;
  alloc->setName(tr("allocated"));
  auto* reserved = new QLineSeries;
  reserved->setName(tr("reserved"));
  double tmax = 0, ymax = 0;
  for (const MemorySample& s : samples) {
    alloc->append(s.time_s * 1e3, s.allocated_bytes / kGiB);
    reserved->append(s.time_s * 1e3, s.reserved_bytes / kGiB);
    tmax = std::max(tmax, s.time_s * 1e3);
    ymax = std::max(ymax, s.reserved_bytes / kGiB);
  }
  tmax = std::max(tmax, p.step_time_s * 1e3);
  auto* usable = new QLineSeries;
  usable->setName(tr("usable − context"));
  const double usableAlloc = (d.usable_gpu_bytes - static_cast<double>(p.gpu_context_bytes)) / kGiB;
  usable->append(0, usableAlloc);
  usable->append(tmax, usableAlloc);
  usable->setPen(QPen(QColor(200, 0, 0), 1.5, Qt::DashLine));
  auto* peak = new QScatterSeries;
  peak->setName(tr("peak"));
  peak->setMarkerSize(11);
  peak->setColor(QColor(200, 0, 0));
  peak->append(d.peak_time_s * 1e3, p.gpu_peak_allocated_bytes / kGiB);
  alloc->setPen(QPen(QColor(0x1f, 0x77, 0xb4), 1.5));
  reserved->setPen(QPen(QColor(0xff, 0x7f, 0x0e), 1.5));
  chart->addSeries(reserved);
  chart->addSeries(alloc);
  chart->addSeries(usable);
  chart->addSeries(peak);
  auto* x = new QValueAxis;
  x->setTitleText(tr("time in step (ms); memory counted in host program order"));
  x->setRange(0, tmax > 0 ? tmax : 1);
  x->setLabelFormat(QStringLiteral("%.0f"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("GiB per GPU"));
  y->setRange(0, std::max(ymax, usableAlloc) * 1.08);
  y->setLabelFormat(QStringLiteral("%.0f"));
  x->applyNiceNumbers();
  y->applyNiceNumbers();
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

// ---------------------------------------------------------------- Timeline

TimelinePage::TimelinePage(QWidget* parent) : QWidget(parent) {
  m_gantt = new TimelineWidget;
  m_gantt->setObjectName(QStringLiteral("gantt"));
  m_model = new TimelineModel(this);
  m_title = new QLabel(tr("Select a plan."));
  m_title->setWordWrap(true);
  m_table = makeTable(m_model, TimelineModel::SortRole);
  auto* proxy = static_cast<QSortFilterProxyModel*>(m_table->model());
  proxy->setFilterKeyColumn(TimelineModel::kName);
  proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
  auto* filter = new QLineEdit;
  filter->setPlaceholderText(tr("Find tasks by name (e.g. \"all-gather\" or \"h.17\")"));
  filter->setClearButtonEnabled(true);
  connect(filter, &QLineEdit::textChanged, proxy, &QSortFilterProxyModel::setFilterFixedString);
  connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (current.isValid()) m_gantt->focusTask(current.data(TimelineModel::TaskRole).toInt());
          });
  auto* lower = new QWidget;
  auto* lv = new QVBoxLayout(lower);
  lv->setContentsMargins(0, 0, 0, 0);
  lv->addWidget(filter);
  lv->addWidget(m_table);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_gantt);
  split->addWidget(lower);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* v = new QVBoxLayout(this);
  v->addWidget(m_title);
  v->addWidget(split, 1);
}

void TimelinePage::setDetail(const StepDetail& d) {
  const Prediction& p = d.prediction;
  m_gantt->setDetail(d);
  m_model->setTasks(d.tasks);
  const StepBreakdown& b = p.breakdown;
  m_title->setText(
      tr("<b>%1</b>: step %2, %3 tasks; bottleneck <b>%4</b>. Critical path: forward %5, backward "
         "%6, recompute %7, optimizer %8, exposed communication %9, offload %10, NVMe %11.<br>"
         "<span style='color:#666'>Wheel: zoom · drag: pan · double-click: whole step · hover a "
         "task for its name, duration and bytes.</span>")
          .arg(QString::fromStdString(PlanSummary(p.plan)), formatSeconds(p.step_time_s))
          .arg(d.tasks.size())
          .arg(QString::fromStdString(p.bottleneck), formatSeconds(b.forward_s),
               formatSeconds(b.backward_s), formatSeconds(b.recompute_s), formatSeconds(b.optimizer_s),
               formatSeconds(b.exposed_comm_s), formatSeconds(b.offload_s), formatSeconds(b.nvme_s)));
  m_table->resizeColumnToContents(TimelineModel::kResource);
  m_table->setColumnWidth(TimelineModel::kName, 360);
}

// ---------------------------------------------------------------- What-if

WhatIfPage::WhatIfPage(QWidget* parent) : QWidget(parent) {
  m_microBatch = new QSlider(Qt::Horizontal);
  m_microBatch->setObjectName(QStringLiteral("whatIfMicroBatch"));
  m_microBatch->setRange(1, 64);
  m_microBatchValue = new QLabel;
  m_microBatchValue->setMinimumWidth(60);
  m_seqLen = new QSlider(Qt::Horizontal);
  m_seqLen->setRange(1, 128);  // in steps of 64 tokens
  m_seqLenValue = new QLabel;
  m_seqLenValue->setMinimumWidth(90);
  m_stage = new QComboBox;
  for (int s = 0; s <= 3; ++s) m_stage->addItem(tr("stage %1").arg(s), s);
  m_offload = new QComboBox;
  m_offload->addItem(tr("none"), 0);
  m_offload->addItem(tr("optimizer → cpu"), 1);
  m_offload->addItem(tr("optimizer + params → cpu (stage 3)"), 2);
  m_checkpointing = new QCheckBox(tr("activation checkpointing"));
  auto* form = new QFormLayout;
  auto row = [](QWidget* a, QWidget* b) {
    auto* h = new QHBoxLayout;
    h->addWidget(a, 1);
    h->addWidget(b);
    return h;
  };
  form->addRow(tr("Micro-batch"), row(m_microBatch, m_microBatchValue));
  form->addRow(tr("Sequence"), row(m_seqLen, m_seqLenValue));
  form->addRow(tr("ZeRO"), m_stage);
  form->addRow(tr("Offload"), m_offload);
  form->addRow(QString(), m_checkpointing);
  auto* controls = new QGroupBox(tr("Change the selected plan (each change re-simulates)"));
  controls->setLayout(form);
  m_verdict = new QLabel(tr("Select a plan first."));
  m_verdict->setObjectName(QStringLiteral("whatIfVerdict"));
  QFont f = m_verdict->font();
  f.setPointSizeF(f.pointSizeF() * 1.3);
  f.setBold(true);
  m_verdict->setFont(f);
  m_verdict->setWordWrap(true);
  m_details = new QLabel;
  m_details->setWordWrap(true);
  m_model = new MemoryBreakdownModel(this);
  m_bar = new MemoryBar;
  m_bar->setModel(m_model);
  auto* v = new QVBoxLayout(this);
  v->addWidget(controls);
  v->addWidget(m_verdict);
  v->addWidget(m_bar);
  v->addWidget(m_details);
  v->addStretch(1);
  connect(m_microBatch, &QSlider::valueChanged, this, &WhatIfPage::changed);
  connect(m_seqLen, &QSlider::valueChanged, this, &WhatIfPage::changed);
  connect(m_stage, &QComboBox::currentIndexChanged, this, &WhatIfPage::changed);
  connect(m_offload, &QComboBox::currentIndexChanged, this, &WhatIfPage::changed);
  connect(m_checkpointing, &QCheckBox::toggled, this, &WhatIfPage::changed);
  setEnabled(false);
}

void WhatIfPage::setBase(const Plan& plan) {
  m_base = plan;
  m_loading = true;
  m_microBatch->setRange(1, static_cast<int>(std::max<int64_t>(64, 4 * plan.micro_batch)));
  m_microBatch->setValue(static_cast<int>(plan.micro_batch));
  m_seqLen->setRange(1, static_cast<int>(std::max<int64_t>(128, 4 * plan.seq_len / 64)));
  m_seqLen->setValue(static_cast<int>(std::max<int64_t>(1, plan.seq_len / 64)));
  m_stage->setCurrentIndex(plan.zero.stage);
  m_offload->setCurrentIndex(plan.OffloadsParams() ? 2 : (plan.OffloadsOptimizer() ? 1 : 0));
  m_checkpointing->setChecked(plan.gradient_checkpointing);
  m_loading = false;
  setEnabled(true);
  changed();
}

Plan WhatIfPage::currentPlan() const {
  Plan p = m_base;
  p.micro_batch = m_microBatch->value();
  // The slider moves in steps of 64 tokens; its starting position keeps the plan's own length.
  const int64_t seq = static_cast<int64_t>(m_seqLen->value()) * 64;
  if (seq != std::max<int64_t>(1, m_base.seq_len / 64) * 64) p.seq_len = seq;
  p.zero.stage = m_stage->currentData().toInt();
  const int off = m_offload->currentData().toInt();
  auto& oo = p.zero.offload_optimizer;
  auto& op = p.zero.offload_param;
  oo.device = off >= 1 ? OffloadDevice::kCpu : OffloadDevice::kNone;
  oo.pin_memory = off >= 1;
  op.device = off >= 2 ? OffloadDevice::kCpu : OffloadDevice::kNone;
  op.pin_memory = off >= 2;
  if (off >= 1 && m_base.zero.offload_optimizer.device == OffloadDevice::kNvme) {
    oo = m_base.zero.offload_optimizer;
  }
  p.gradient_checkpointing = m_checkpointing->isChecked();
  return p;
}

void WhatIfPage::changed() {
  if (m_loading) return;
  const Plan p = currentPlan();
  m_microBatchValue->setText(QString::number(p.micro_batch));
  m_seqLenValue->setText(tr("%1 tokens").arg(p.seq_len));
  emit simulateRequested(p);
}

void WhatIfPage::setResult(const WhatIfResult& r) {
  if (!r.detail) {
    m_fits.reset();
    m_verdict->setText(tr("<span style='color:#b60'>Not a valid DeepSpeed plan: %1</span>")
                           .arg(r.error.toHtmlEscaped()));
    m_model->clear();
    m_details->clear();
    return;
  }
  const Prediction& p = r.detail->prediction;
  m_fits = p.fits;
  m_model->setPrediction(p);
  m_bar->setLimits(static_cast<double>(p.gpu_capacity_bytes), r.detail->usable_gpu_bytes);
  const double headroom = r.detail->usable_gpu_bytes - static_cast<double>(p.gpu_total_bytes);
  if (p.fits) {
    m_verdict->setText(tr("<span style='color:#080'>Fits</span>: peak %1 of %2 usable (%3 free); "
                          "%4 tokens/s, step %5")
                           .arg(formatBytes(static_cast<double>(p.gpu_total_bytes)),
                                formatBytes(r.detail->usable_gpu_bytes), formatBytes(headroom))
                           .arg(p.tokens_per_s, 0, 'f', 0)
                           .arg(formatSeconds(p.step_time_s)));
  } else {
    m_verdict->setText(tr("<span style='color:#c00'>Does not fit</span>: %1")
                           .arg(QString::fromStdString(p.reason).toHtmlEscaped()));
  }
  // Which part crosses the line: the largest category at the peak.
  int largest = 0;
  for (int c = 1; c < kNumMemCategories; ++c) {
    if (p.gpu_breakdown_at_peak[c] > p.gpu_breakdown_at_peak[largest]) largest = c;
  }
  QString limit = r.largestFittingMicroBatch > 0
                      ? tr("largest micro-batch that fits with these settings: <b>%1</b>")
                            .arg(r.largestFittingMicroBatch)
                      : tr("<b>no micro-batch fits</b> with these settings");
  m_details->setText(tr("Peak at <i>%1</i>; largest part %2 (%3). %4.")
                         .arg(QString::fromStdString(p.gpu_peak_task).toHtmlEscaped(),
                              QString::fromUtf8(MemCategoryName(static_cast<MemCategory>(largest))),
                              formatBytes(static_cast<double>(p.gpu_breakdown_at_peak[largest])),
                              limit));
}

// ---------------------------------------------------------------- Trade-off

TradeoffPage::TradeoffPage(QWidget* parent) : QWidget(parent) {
  auto* chart = new QChart;
  chart->setTitle(tr("Throughput against peak GPU memory (click a point to select its plan)"));
  chart->legend()->setAlignment(Qt::AlignBottom);
  m_view = new QChartView(chart);
  m_view->setRenderHint(QPainter::Antialiasing);
  auto* v = new QVBoxLayout(this);
  v->addWidget(m_view);
}

void TradeoffPage::setReport(const PlanReport& r) {
  m_report = r;
  QChart* chart = m_view->chart();
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
  auto* all = new QScatterSeries;
  all->setName(tr("every fitting plan simulated"));
  all->setMarkerSize(7);
  all->setColor(QColor(170, 170, 170));
  all->setBorderColor(QColor(170, 170, 170));
  auto* best = new QScatterSeries;
  best->setName(tr("best per choice (the table)"));
  best->setMarkerSize(10);
  best->setColor(QColor(0xff, 0x7f, 0x0e));
  auto* front = new QLineSeries;
  front->setName(tr("Pareto front"));
  front->setPen(QPen(QColor(0x1f, 0x77, 0xb4), 2));
  front->setPointsVisible(true);
  double xmax = 0, ymax = 0;
  auto add = [&](QXYSeries* s, const ScoredPlan& p) {
    const double x = p.prediction.gpu_total_bytes / kGiB;
    const double y = p.prediction.tokens_per_s;
    s->append(x, y);
    xmax = std::max(xmax, x);
    ymax = std::max(ymax, y);
  };
  for (const ScoredPlan& p : r.ranked) add(all, p);
  for (const ScoredPlan& p : r.recommendations) add(best, p);
  std::vector<ScoredPlan> pareto = r.pareto;
  std::sort(pareto.begin(), pareto.end(), [](const ScoredPlan& a, const ScoredPlan& b) {
    return a.prediction.gpu_total_bytes < b.prediction.gpu_total_bytes;
  });
  for (const ScoredPlan& p : pareto) add(front, p);
  chart->addSeries(all);
  chart->addSeries(front);
  chart->addSeries(best);
  auto* x = new QValueAxis;
  x->setTitleText(tr("peak GPU memory per GPU (GiB)"));
  x->setRange(0, std::max({xmax, r.usable_gpu_bytes / kGiB, 1.0}) * 1.05);
  x->setLabelFormat(QStringLiteral("%.0f"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("tokens/s (cluster)"));
  y->setRange(0, std::max(ymax, 1.0) * 1.1);
  y->setLabelFormat(QStringLiteral("%.0f"));
  x->applyNiceNumbers();
  y->applyNiceNumbers();
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  auto* usable = new QLineSeries;
  usable->setName(tr("usable GPU memory"));
  usable->append(r.usable_gpu_bytes / kGiB, 0);
  usable->append(r.usable_gpu_bytes / kGiB, y->max());
  usable->setPen(QPen(QColor(200, 0, 0), 1.5, Qt::DashLine));
  chart->addSeries(usable);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
  auto pick = [this](const std::vector<ScoredPlan>& plans, QPointF pt) {
    const ScoredPlan* nearest = nullptr;
    double bestD = 1e300;
    for (const ScoredPlan& p : plans) {
      const double dx = (p.prediction.gpu_total_bytes / kGiB - pt.x()) / std::max(1.0, pt.x());
      const double dy = (p.prediction.tokens_per_s - pt.y()) / std::max(1.0, pt.y());
      const double d = dx * dx + dy * dy;
      if (d < bestD) {
        bestD = d;
        nearest = &p;
      }
    }
    if (nearest) emit planClicked(*nearest);
  };
  connect(all, &QXYSeries::clicked, this, [this, pick](QPointF pt) { pick(m_report.ranked, pt); });
  connect(best, &QXYSeries::clicked, this, [this, pick](QPointF pt) { pick(m_report.recommendations, pt); });
  connect(front, &QXYSeries::clicked, this, [this, pick](QPointF pt) { pick(m_report.pareto, pt); });
  for (QLegendMarker* m : chart->legend()->markers(usable)) m->setVisible(true);
}

// ---------------------------------------------------------------- Check

CheckPage::CheckPage(QWidget* parent) : QWidget(parent) {
  m_editor = new QPlainTextEdit;
  m_editor->setPlaceholderText(tr("Paste a ds_config.json here, or open one. It is judged for "
                                  "the model, cluster and lengths of the last plan request."));
  QFont mono(QStringLiteral("DejaVu Sans Mono"));
  mono.setStyleHint(QFont::Monospace);
  m_editor->setFont(mono);
  connect(m_editor, &QPlainTextEdit::textChanged, this, [this] {
    if (!m_editor->document()->isModified()) return;
    m_source = QStringLiteral("pasted ds_config");
  });
  auto* open = new QPushButton(tr("Open…"));
  auto* check = new QPushButton(tr("Check"));
  check->setObjectName(QStringLiteral("checkButton"));
  connect(open, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a ds_config.json"), {},
                                                      tr("JSON (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
      setError(tr("%1: cannot read (%2)").arg(path, f.errorString()));
      return;
    }
    m_editor->setPlainText(QString::fromUtf8(f.readAll()));
    m_editor->document()->setModified(false);
    m_source = path;
    emit checkRequested(m_editor->toPlainText(), m_source);
  });
  connect(check, &QPushButton::clicked, this,
          [this] { emit checkRequested(m_editor->toPlainText(), m_source); });
  m_verdict = new QLabel(tr("No config checked yet."));
  m_verdict->setWordWrap(true);
  m_verdict->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_warnings = new QListWidget;
  m_warnings->setWordWrap(true);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(open);
  buttons->addWidget(check);
  buttons->addStretch(1);
  auto* left = new QVBoxLayout;
  left->addLayout(buttons);
  left->addWidget(m_editor, 1);
  auto* right = new QVBoxLayout;
  right->addWidget(m_verdict);
  right->addWidget(new QLabel(tr("<b>Warnings and findings</b>")));
  right->addWidget(m_warnings, 1);
  auto* h = new QHBoxLayout(this);
  h->addLayout(left, 1);
  h->addLayout(right, 1);
}

void CheckPage::setResult(const CheckResult& c) {
  const Prediction& p = c.detail->prediction;
  m_verdict->setText(
      tr("<b>%1</b>: %2<br>%3, micro-batch %4 × %5 on %6 × %7 GPUs<br>peak per GPU %8 of %9 "
         "(at %10)<br>step %11, %12 tokens/s, MFU %13 %, bottleneck %14")
          .arg(c.source.toHtmlEscaped(),
               p.fits ? tr("<span style='color:#080'>fits</span>")
                      : tr("<span style='color:#c00'>does not fit: %1</span>")
                            .arg(QString::fromStdString(p.reason).toHtmlEscaped()),
               QString::fromStdString(PlanSummary(p.plan)))
          .arg(p.plan.micro_batch)
          .arg(p.plan.grad_accum)
          .arg(p.plan.nodes)
          .arg(p.plan.gpus_per_node)
          .arg(formatBytes(static_cast<double>(p.gpu_total_bytes)),
               formatBytes(static_cast<double>(p.gpu_capacity_bytes)),
               QString::fromStdString(p.gpu_peak_task).toHtmlEscaped(), formatSeconds(p.step_time_s))
          .arg(p.tokens_per_s, 0, 'f', 0)
          .arg(100 * p.mfu, 0, 'f', 1)
          .arg(QString::fromStdString(p.bottleneck)));
  QString alt;
  if (!c.alternative) {
    alt = tr("dsplan finds no plan that fits this model and cluster at global batch %1.")
              .arg(p.plan.train_batch());
  } else {
    const ScoredPlan& a = *c.alternative;
    alt = tr("dsplan would pick: %1, micro-batch %2 × %3, %4 tokens/s, peak %5%6.")
              .arg(QString::fromStdString(PlanSummary(a.plan)))
              .arg(a.plan.micro_batch)
              .arg(a.plan.grad_accum)
              .arg(a.prediction.tokens_per_s, 0, 'f', 0)
              .arg(formatBytes(static_cast<double>(a.prediction.gpu_total_bytes)),
                   c.speedup > 0 ? tr(" (%1× this config's speed)").arg(c.speedup, 0, 'f', 2)
                                 : QString());
  }
  m_verdict->setText(m_verdict->text() + QStringLiteral("<br><br>") + alt.toHtmlEscaped());
  m_warnings->clear();
  if (c.warnings.isEmpty()) m_warnings->addItem(tr("none"));
  m_warnings->addItems(c.warnings);
}

void CheckPage::setError(const QString& message) {
  m_verdict->setText(tr("<span style='color:#c00'><b>Cannot check:</b> %1</span>").arg(message.toHtmlEscaped()));
  m_warnings->clear();
}

}  // namespace dsplan::gui

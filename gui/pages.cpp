// SPDX-License-Identifier: Apache-2.0
#include "pages.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
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
#include <QMessageBox>
#include <QtCharts/QAreaSeries>
#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QHorizontalBarSeries>
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
#include "models/memorycomparemodel.h"
#include "models/validationmodel.h"
#include "models/planstablemodel.h"
#include "models/timelinemodel.h"
#include "timelinewidget.h"

namespace dsplan::gui {
namespace {

// Puts |x| at the bottom and |y| on the left of |chart| and attaches every series to both.
void AttachAxes(QChart* chart, QAbstractAxis* x, QAbstractAxis* y) {
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}
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
  m_modelB = new MemoryBreakdownModel(this);
  m_compare = new MemoryCompareModel(this);
  m_bar = new MemoryBar;
  m_bar->setObjectName(QStringLiteral("memoryBar"));
  m_bar->setModel(m_model);
  m_barB = new MemoryBar;
  m_barB->setObjectName(QStringLiteral("memoryBarB"));
  m_barB->setModel(m_modelB);
  m_barB->hide();
  m_title = new QLabel(tr("Select a plan."));
  m_title->setWordWrap(true);
  m_titleB = new QLabel;
  m_titleB->setWordWrap(true);
  m_titleB->hide();
  m_compareBox = new QComboBox;
  m_compareBox->setObjectName(QStringLiteral("compareWith"));
  m_compareBox->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  m_compareBox->setMinimumContentsLength(34);
  m_compareBox->addItem(tr("— no second plan —"), -1);
  connect(m_compareBox, &QComboBox::currentIndexChanged, this, [this] { updateCompare(); });
  m_table = makeTable(m_model, MemoryBreakdownModel::SortRole);
  m_table->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_table->setMinimumWidth(390);
  m_table->setMaximumWidth(420);
  m_compareTable = makeTable(m_compare, MemoryCompareModel::SortRole);
  m_compareTable->setObjectName(QStringLiteral("compareTable"));
  m_compareTable->setMinimumWidth(470);
  m_compareTable->setMaximumWidth(490);
  m_compareTable->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_compareTable->hide();
  auto* chart = new QChart;
  chart->setTitle(tr("GPU memory over the step"));
  chart->legend()->setAlignment(Qt::AlignBottom);
  m_chart = new QChartView(chart);
  m_chart->setRenderHint(QPainter::Antialiasing);
  auto* h = new QHBoxLayout;
  h->addWidget(m_table);
  h->addWidget(m_compareTable);
  h->addWidget(m_chart, 1);
  auto* top = new QHBoxLayout;
  top->addWidget(m_title, 1);
  top->addWidget(new QLabel(tr("Compare with:")));
  top->addWidget(m_compareBox);
  auto* v = new QVBoxLayout(this);
  v->addLayout(top);
  v->addWidget(m_bar);
  v->addWidget(m_titleB);
  v->addWidget(m_barB);
  v->addLayout(h, 1);
}

void MemoryPage::setReport(const PlanReport& r) {
  m_report = r;
  const QSignalBlocker block(m_compareBox);
  m_compareBox->clear();
  m_compareBox->addItem(tr("— no second plan —"), -1);
  for (int i = 0; i < static_cast<int>(r.recommendations.size()); ++i) {
    const Plan& p = r.recommendations[static_cast<size_t>(i)].plan;
    m_compareBox->addItem(tr("#%1 stage %2, %3, ckpt %4, %5 × %6")
                              .arg(i + 1)
                              .arg(stageText(p.zero.stage, r.recommendations[static_cast<size_t>(i)].same_as_stages))
                              .arg(offloadText(p))
                              .arg(p.gradient_checkpointing ? tr("on") : tr("off"))
                              .arg(p.micro_batch)
                              .arg(p.grad_accum),
                          i);
  }
  updateCompare();
}

void MemoryPage::compareWith(int index) {
  const int i = m_compareBox->findData(index);
  m_compareBox->setCurrentIndex(i >= 0 ? i : 0);
  updateCompare();
}

void MemoryPage::updateCompare() {
  const int index = m_compareBox->currentData().toInt();
  const bool on = m_a && index >= 0 && index < static_cast<int>(m_report.recommendations.size());
  m_barB->setVisible(on);
  m_titleB->setVisible(on);
  m_compareTable->setVisible(on);
  m_table->setVisible(!on);
  if (!on) {
    m_modelB->clear();
    m_compare->clear();
    m_bar->setScaleBytes(0);
    return;
  }
  const ScoredPlan& b = m_report.recommendations[static_cast<size_t>(index)];
  const Prediction& pb = b.prediction;
  m_modelB->setPrediction(pb);
  auto name = [](const Plan& p) {
    return tr("stage %1, %2×%3").arg(p.zero.stage).arg(p.micro_batch).arg(p.grad_accum);
  };
  m_compare->setPlans(*m_a, tr("A: %1").arg(name(m_a->plan)), pb,
                      tr("B: %1").arg(name(pb.plan)));
  // One scale for both bars: the larger of the capacities and the totals.
  const double scale = std::max({static_cast<double>(m_a->gpu_capacity_bytes),
                                 static_cast<double>(m_a->gpu_total_bytes),
                                 static_cast<double>(pb.gpu_capacity_bytes),
                                 static_cast<double>(pb.gpu_total_bytes)});
  m_bar->setScaleBytes(scale);
  m_barB->setScaleBytes(scale);
  m_barB->setLimits(static_cast<double>(pb.gpu_capacity_bytes),
                    m_report.usable_gpu_bytes -
                        static_cast<double>(pb.gpu_upper_total_bytes - pb.gpu_total_bytes));
  const double diff = static_cast<double>(pb.gpu_total_bytes - m_a->gpu_total_bytes);
  m_titleB->setText(tr("<b>B</b>: #%1 %2, micro-batch %3 × %4. Peak %5 (%6%7 than A); %8 tokens/s "
                       "(A: %9).")
                        .arg(index + 1)
                        .arg(QString::fromStdString(PlanSummary(pb.plan)))
                        .arg(pb.plan.micro_batch)
                        .arg(pb.plan.grad_accum)
                        .arg(formatBytes(static_cast<double>(pb.gpu_total_bytes)),
                             formatBytes(std::abs(diff)), diff >= 0 ? tr(" more") : tr(" less"))
                        .arg(pb.tokens_per_s, 0, 'f', 0)
                        .arg(m_a->tokens_per_s, 0, 'f', 0));
  m_compareTable->resizeColumnsToContents();
  m_compareTable->setColumnWidth(MemoryCompareModel::kCategory, 205);
  for (int c = MemoryCompareModel::kA; c <= MemoryCompareModel::kDifference; ++c) {
    m_compareTable->setColumnWidth(c, 84);
  }
}

void MemoryPage::setDetail(const StepDetail& d) {
  const Prediction& p = d.prediction;
  m_a = p;
  m_model->setPrediction(p);
  m_bar->setLimits(static_cast<double>(p.gpu_capacity_bytes), d.usable_gpu_bytes);
  // ZeRO-1/2 ranks differ: the memory shown is the rank that allocates the most.
  const QString rank =
      p.rank_peaks.empty()
          ? QString()
          : tr(" (rank %1 of %2, the one that allocates the most)")
                .arg(p.facts.rank)
                .arg(p.plan.dp_size());
  m_title->setText(tr("<b>A</b>: <b>%1</b>, micro-batch %2 × %3. Peak per GPU%12 %4 (reserved %5 + "
                      "CUDA context %6; allocated %7; NCCL outside it %11) at <i>%8</i>; %9. %10")
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
                                         .arg(QString::fromStdString(p.reason).toHtmlEscaped()))
                       .arg(tr("Band: measured peaks expected %1 to %2 (reserved −%3 % / +%4 % + "
                               "context + NCCL).")
                                .arg(formatBytes(static_cast<double>(p.gpu_peak_reserved_bytes) *
                                                     (1 - p.memory_band.lower) +
                                                 static_cast<double>(p.gpu_context_bytes)),
                                     formatBytes(static_cast<double>(p.gpu_upper_total_bytes)))
                                .arg(100 * p.memory_band.lower, 0, 'f', 0)
                                .arg(100 * p.memory_band.upper, 0, 'f', 0))
                       .arg(formatBytes(static_cast<double>(p.gpu_nccl_bytes)))
                       .arg(rank));
  m_table->resizeColumnsToContents();
  m_table->setColumnWidth(MemoryBreakdownModel::kCategory, 215);
  updateCompare();
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
  x->setTitleText(tr("time in step (ms), host program order"));
  x->setRange(0, tmax > 0 ? tmax : 1);
  x->setLabelFormat(QStringLiteral("%.0f"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("GiB per GPU"));
  y->setRange(0, std::max(ymax, usableAlloc) * 1.08);
  y->setLabelFormat(QStringLiteral("%.0f"));
  x->applyNiceNumbers();
  y->applyNiceNumbers();
  AttachAxes(chart, x, y);
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
          .arg(QString::fromStdString(PlanSummary(p.plan)),
               tr("%1 (measured expected in %2–%3)")
                   .arg(formatSeconds(p.step_time_s), formatSeconds(p.time_band.low * p.step_time_s),
                        formatSeconds(p.time_band.high * p.step_time_s)))
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
  // The bands of the table's plans as whiskers: tokens/s over the step-time band (measured
  // step times low..high x predicted, so tokens/s from 1/high to 1/low x predicted) and peak
  // memory over the memory band (reserved x (1 - lower) + context .. the upper-band total).
  std::vector<QLineSeries*> whiskers;
  for (const ScoredPlan& s : r.recommendations) {
    const Prediction& d = s.prediction;
    const double x = d.gpu_total_bytes / kGiB;
    const double y = d.tokens_per_s;
    const double ctx = static_cast<double>(d.gpu_context_bytes);
    const double xlo = (static_cast<double>(d.gpu_peak_reserved_bytes) * (1 - d.memory_band.lower) + ctx) / kGiB;
    const double xhi = static_cast<double>(d.gpu_upper_total_bytes) / kGiB;
    const double ylo = d.time_band.high > 0 ? y / d.time_band.high : y;
    const double yhi = d.time_band.low > 0 ? y / d.time_band.low : y;
    auto* v = new QLineSeries;
    v->append(x, ylo);
    v->append(x, yhi);
    auto* h = new QLineSeries;
    h->append(xlo, y);
    h->append(xhi, y);
    for (QLineSeries* w : {v, h}) {
      w->setPen(QPen(QColor(0xff, 0x7f, 0x0e, 170), 1.5));
      whiskers.push_back(w);
    }
    xmax = std::max(xmax, xhi);
    ymax = std::max(ymax, yhi);
  }
  std::vector<ScoredPlan> pareto = r.pareto;
  std::sort(pareto.begin(), pareto.end(), [](const ScoredPlan& a, const ScoredPlan& b) {
    return a.prediction.gpu_total_bytes < b.prediction.gpu_total_bytes;
  });
  for (const ScoredPlan& p : pareto) add(front, p);
  chart->addSeries(all);
  chart->addSeries(front);
  for (QLineSeries* w : whiskers) chart->addSeries(w);
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
  // One legend entry for all whiskers.
  for (size_t i = 0; i < whiskers.size(); ++i) {
    if (i == 0) whiskers[i]->setName(tr("error bands (time ↕, memory ↔)"));
    for (QLegendMarker* m : chart->legend()->markers(whiskers[i])) m->setVisible(i == 0);
  }
}

QChart* TradeoffPage::chart() const { return m_view->chart(); }

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

// ---------------------------------------------------------------- Validation

namespace dsplan::gui {
namespace {

QChartView* makeChartView(const QString& title) {
  auto* chart = new QChart;
  chart->setTitle(title);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  auto* v = new QChartView(chart);
  v->setRenderHint(QPainter::Antialiasing);
  return v;
}

void clearChart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

// Predicted and measured of |rows| as horizontal bar pairs, values divided by |unit|.
void fillBars(QChart* chart, const QVector<ValidationRowValue>& rows, double unit,
              const QString& axisTitle) {
  clearChart(chart);
  auto* pred = new QBarSet(QObject::tr("predicted"));
  pred->setColor(QColor(0x1f, 0x77, 0xb4));
  auto* meas = new QBarSet(QObject::tr("measured"));
  meas->setColor(QColor(0xff, 0x7f, 0x0e));
  QStringList names;
  double vmax = 0;
  // Horizontal bars are drawn bottom-up: reverse so that the first row is on top.
  for (auto it = rows.crbegin(); it != rows.crend(); ++it) {
    names << it->quantity;
    *pred << it->predicted / unit;
    *meas << it->measured / unit;
    vmax = std::max({vmax, it->predicted / unit, it->measured / unit});
  }
  auto* series = new QHorizontalBarSeries;
  series->append(pred);
  series->append(meas);
  chart->addSeries(series);
  auto* cats = new QBarCategoryAxis;
  cats->append(names);
  auto* values = new QValueAxis;
  values->setTitleText(axisTitle);
  values->setRange(0, std::max(vmax, 1e-9) * 1.05);
  values->setLabelFormat(vmax >= 10 ? QStringLiteral("%.0f") : QStringLiteral("%.1f"));
  values->applyNiceNumbers();
  chart->addAxis(cats, Qt::AlignLeft);
  chart->addAxis(values, Qt::AlignBottom);
  series->attachAxis(cats);
  series->attachAxis(values);
}

}  // namespace

ValidationPage::ValidationPage(QWidget* parent) : QWidget(parent) {
  m_model = new ValidationRowsModel(this);
  auto* openButton = new QPushButton(tr("Open report…"));
  openButton->setObjectName(QStringLiteral("openValidation"));
  connect(openButton, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open a dsplan validate --json report"), {}, tr("JSON (*.json);;All files (*)"));
    if (!path.isEmpty()) open(path);
  });
  m_header = new QLabel(tr("Open the JSON report of <tt>dsplan validate --json</tt> (or "
                           "<tt>--json-out FILE</tt>) to see what was measured against what "
                           "dsplan predicted. docs/validation/h200/*.json are real H200 runs."));
  m_header->setWordWrap(true);
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_table = makeTable(m_model, ValidationRowsModel::SortRole);
  m_table->setMinimumWidth(450);
  m_table->setMaximumWidth(470);
  m_table->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_classes = makeChartView(tr("Busy time per task class over one step"));
  m_memory = makeChartView(tr("GPU memory peaks (the report has no measured curve)"));
  m_steps = makeChartView(tr("Step time of each measured step"));
  m_steps->setMaximumWidth(470);
  auto* top = new QHBoxLayout;
  top->addWidget(m_header, 1);
  top->addWidget(openButton, 0, Qt::AlignTop);
  auto* left = new QVBoxLayout;
  left->addWidget(m_table, 3);
  left->addWidget(m_steps, 2);
  auto* charts = new QVBoxLayout;
  charts->addWidget(m_classes, 3);
  charts->addWidget(m_memory, 2);
  auto* h = new QHBoxLayout;
  h->addLayout(left);
  h->addLayout(charts, 1);
  auto* v = new QVBoxLayout(this);
  v->addLayout(top);
  v->addLayout(h, 1);
}

QChart* ValidationPage::classChart() const { return m_classes->chart(); }
QChart* ValidationPage::memoryChart() const { return m_memory->chart(); }
QChart* ValidationPage::stepChart() const { return m_steps->chart(); }

QString ValidationPage::open(const QString& path) {
  auto d = LoadValidationReport(path);
  if (!d.ok()) {
    const QString message = QString::fromStdString(d.status().message());
    m_header->setText(tr("<span style='color:#c00'><b>Cannot show this report:</b> %1</span>")
                          .arg(message.toHtmlEscaped()));
    m_model->clear();
    for (QChart* c : {classChart(), memoryChart(), stepChart()}) clearChart(c);
    emit failed(message);
    return message;
  }
  display(*d);
  return {};
}

void ValidationPage::display(const ValidationData& d) {
  m_model->setValidation(d);
  m_table->resizeColumnsToContents();
  m_table->setColumnWidth(ValidationRowsModel::kQuantity, 175);
  const QString verdict =
      d.pass ? tr("<span style='color:#080'><b>%1</b></span>").arg(d.verdict.toHtmlEscaped())
             : tr("<span style='color:#c00'><b>%1</b></span>").arg(d.verdict.toHtmlEscaped());
  QString what = d.model.isEmpty() ? tr("(model not recorded)") : d.model.toHtmlEscaped();
  if (!d.plan.isEmpty()) {
    what += tr(", %1, micro-batch %2 × %3, sequence %4%5")
                .arg(d.plan.toHtmlEscaped())
                .arg(d.microBatch)
                .arg(d.gradAccum)
                .arg(d.seqLen)
                .arg(d.targetLen > 0 ? tr(" + %1").arg(d.targetLen) : QString());
  }
  m_header->setText(
      tr("<b>%1</b><br>%2 on %3 × %4 (profile %5, predicted for %6)%7<br>%8")
          .arg(QFileInfo(d.path).fileName().toHtmlEscaped(), what, QString::number(d.worldSize),
               d.deviceName.toHtmlEscaped(), d.profile.toHtmlEscaped(),
               d.softwareStack.isEmpty() ? tr("dsplan's runtime") : d.softwareStack.toHtmlEscaped(),
               d.measuredTokensPerSecondPerGpu > 0
                   ? tr("; measured %1 tokens/s per GPU, MFU %2 %")
                         .arg(d.measuredTokensPerSecondPerGpu, 0, 'f', 0)
                         .arg(100 * d.mfu, 0, 'f', 1)
                   : QString(),
               d.outOfMemory ? verdict + QStringLiteral("<br>") + d.oom.toHtmlEscaped() : verdict));
  QVector<ValidationRowValue> classes, memory;
  for (const ValidationRowValue& r : d.rows) {
    if (r.bytes) {
      memory << r;
    } else if (r.quantity != QStringLiteral("step time")) {
      classes << r;
    }
  }
  fillBars(classChart(), classes, 1e-3, tr("busy time per step (ms)"));
  fillBars(memoryChart(), memory, kGiB, tr("GiB per GPU"));
  // Each measured step against the prediction (and the PyTorch + DeepSpeed prediction of the
  // same plan, when the report has it).
  QChart* chart = stepChart();
  clearChart(chart);
  auto* measured = new QScatterSeries;
  measured->setName(tr("measured"));
  measured->setMarkerSize(9);
  measured->setColor(QColor(0xff, 0x7f, 0x0e));
  double ymax = 0;
  for (int i = 0; i < d.stepSeconds.size(); ++i) {
    measured->append(i + 1, d.stepSeconds[i] * 1e3);
    ymax = std::max(ymax, d.stepSeconds[i] * 1e3);
  }
  const double xmax = std::max<double>(2, d.stepSeconds.size() + 1);
  auto line = [&](double seconds, const QString& name, QColor color, Qt::PenStyle style) {
    auto* s = new QLineSeries;
    s->setName(name);
    s->append(0, seconds * 1e3);
    s->append(xmax, seconds * 1e3);
    s->setPen(QPen(color, 2, style));
    ymax = std::max(ymax, seconds * 1e3);
    chart->addSeries(s);
  };
  if (const ValidationRowValue* step = d.row(QStringLiteral("step time"))) {
    line(step->predicted, tr("predicted"), QColor(0x1f, 0x77, 0xb4), Qt::SolidLine);
  }
  if (d.deepspeedPredictedStepSeconds > 0) {
    line(d.deepspeedPredictedStepSeconds, tr("predicted for DeepSpeed"), QColor(120, 120, 120),
         Qt::DashLine);
  }
  chart->addSeries(measured);
  auto* x = new QValueAxis;
  x->setTitleText(tr("measured step"));
  x->setRange(0, xmax);
  x->setTickCount(std::min<int>(static_cast<int>(xmax) + 1, 11));
  x->setLabelFormat(QStringLiteral("%.0f"));
  auto* y = new QValueAxis;
  y->setTitleText(tr("step time (ms)"));
  y->setRange(0, std::max(ymax, 1e-6) * 1.15);
  y->setLabelFormat(QStringLiteral("%.0f"));
  y->applyNiceNumbers();
  AttachAxes(chart, x, y);
}

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
#include "models/planstablemodel.h"

#include <QColor>
#include <QStringList>

#include "models/format.h"

namespace dsplan::gui {

PlansTableModel::PlansTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlansTableModel::setReport(const PlanReport& report) {
  beginResetModel();
  m_report = report;
  m_rows.clear();
  for (int i = 0; i < static_cast<int>(m_report.recommendations.size()); ++i) {
    Row r;
    r.plan = i;
    const std::string choice = ChoiceSummary(m_report.recommendations[i].plan);
    for (int j = 0; j < static_cast<int>(m_report.rejected.size()); ++j) {
      if (m_report.rejected[j].family == choice) r.rejected = j;
    }
    m_rows.push_back(r);
  }
  // Choices where nothing fits (best_tokens_per_s == 0) as greyed rows.
  for (int j = 0; j < static_cast<int>(m_report.rejected.size()); ++j) {
    if (m_report.rejected[j].best_tokens_per_s > 0) continue;
    Row r;
    r.rejected = j;
    const QString family = QString::fromStdString(m_report.rejected[j].family);
    const QStringList parts = family.split(QStringLiteral(", "));
    bool ok = false;
    const int stage = parts.size() == 3 && parts[0].startsWith(QStringLiteral("stage "))
                          ? parts[0].mid(6).toInt(&ok)
                          : -1;
    if (ok) {
      r.stage = stage;
      QString off = parts[1];
      if (off == QStringLiteral("no offload")) {
        off = QStringLiteral("none");
      } else {
        off.replace(QStringLiteral("offload "), QString());
        off.replace(QStringLiteral("optimizer->"), QStringLiteral("opt→"));
        off.replace(QStringLiteral(" params->"), QStringLiteral(", par→"));
        off.replace(QStringLiteral("params->"), QStringLiteral("par→"));
      }
      r.offload = off;
      r.checkpointing = parts[2] == QStringLiteral("checkpointing") ? QStringLiteral("on")
                                                                    : QStringLiteral("off");
    } else {
      r.offload = family;
    }
    m_rows.push_back(r);
  }
  endResetModel();
}

const ScoredPlan* PlansTableModel::plan(int index) const {
  if (index < 0 || index >= static_cast<int>(m_report.recommendations.size())) return nullptr;
  return &m_report.recommendations[index];
}

int PlansTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int PlansTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant PlansTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return {};
  if (role == Qt::DisplayRole) {
    static const char* kNames[kColumnCount] = {
        "#", "Stage", "Offload", "Ckpt", "Batch", "Tokens/s", "Step", "MFU", "Peak GPU",
        "Headroom", "Host RAM", "Bucket", "Bottleneck", "Limit / reason"};
    return QString::fromUtf8(kNames[section]);
  }
  if (role == Qt::ToolTipRole) {
    static const char* kTips[kColumnCount] = {
        "Rank by the objective",
        "ZeRO stage",
        "offload_optimizer / offload_param device",
        "Activation (gradient) checkpointing",
        "micro-batch per GPU × gradient accumulation steps = global batch (train_batch_size)",
        "Training tokens per second over the cluster",
        "Predicted time of one optimizer step, and in brackets the range measured step times "
        "are expected in (the step-time band drawn from real DeepSpeed runs)",
        "Model FLOPs utilisation",
        "Predicted peak per GPU: reserved + CUDA context + NCCL (dsplan's \"peak GPU\"); in "
        "brackets the memory band's upper end (reserved × (1 + band) + context + NCCL)",
        "What the plan leaves of the usable GPU memory (capacity less --headroom) after its band's upper end: reserved × (1 + band) + context + NCCL",
        "Host RAM per node: offload buffers + 2.1 GiB per process",
        "reduce_bucket_size (elements)",
        "The largest part of the critical path",
        "Why nothing larger fits (fitting rows), or why the choice has no plan (greyed rows: memory, or a plan DeepSpeed would not train)"};
    return QString::fromUtf8(kTips[section]);
  }
  return {};
}

QVariant PlansTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= m_rows.size() || index.column() >= kColumnCount) {
    return {};
  }
  const Row& row = m_rows[index.row()];
  if (role == PlanIndexRole) return row.plan;
  if (role == FitsRole) return row.plan >= 0;
  return row.plan >= 0 ? fitRow(row, index.column(), role)
                       : rejectedRow(row, index.column(), role);
}

QVariant PlansTableModel::fitRow(const Row& row, int column, int role) const {
  const ScoredPlan& s = m_report.recommendations[row.plan];
  const Plan& p = s.plan;
  const Prediction& d = s.prediction;
  // What the plan leaves free of the usable GPU after its error band and NCCL, as the fit rule
  // counts it (docs/planner.md "Memory headroom"), not only after its nominal peak.
  const double headroom = m_report.usable_gpu_bytes - static_cast<double>(d.gpu_upper_total_bytes);
  if (role == Qt::TextAlignmentRole) {
    const bool number = column == kRank || column == kStage || column == kPeak ||
                        column == kHeadroom || column == kHostRam || column == kStepTime ||
                        column == kTokensPerSecond || column == kMfu;
    return QVariant::fromValue<int>((number ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignVCenter);
  }
  if (role == Qt::ToolTipRole) {
    QString tip = QStringLiteral("%1, micro-batch %2 × %3").arg(QString::fromStdString(PlanSummary(p))).arg(p.micro_batch).arg(p.grad_accum);
    if (!s.same_as_stages.empty()) {
      QStringList others;
      for (int o : s.same_as_stages) others << QString::number(o);
      tip += QStringLiteral("\nstage %1 gives the same plan (same batch, speed and peak within "
                            "0.1 %): one row, as dsplan prints \"%2\"")
                 .arg(others.join(QStringLiteral(", ")), stageText(p.zero.stage, s.same_as_stages));
    }
    tip += QStringLiteral("\npeak %1 (reserved + context %2, NCCL %3) at %4; with the memory band "
                          "up to %5")
               .arg(formatBytes(static_cast<double>(d.gpu_total_bytes + d.gpu_nccl_bytes)),
                    formatBytes(static_cast<double>(d.gpu_total_bytes)),
                    formatBytes(static_cast<double>(d.gpu_nccl_bytes)),
                    QString::fromStdString(d.gpu_peak_task),
                    formatBytes(static_cast<double>(d.gpu_upper_total_bytes)));
    tip += QStringLiteral("\nstep %1: measured step times are expected within %2–%3× the "
                          "predicted (%4)")
               .arg(formatSeconds(d.step_time_s))
               .arg(d.time_band.low, 0, 'f', 2)
               .arg(d.time_band.high, 0, 'f', 2)
               .arg(QString::fromStdString(d.time_band.basis));
    if (row.rejected >= 0) {
      tip += QStringLiteral("\nwhy not more: %1")
                 .arg(QString::fromStdString(m_report.rejected[row.rejected].reason));
    }
    return tip;
  }
  if (role == Qt::DisplayRole) {
    switch (column) {
      case kRank: return row.plan + 1;
      case kStage: return stageText(p.zero.stage, s.same_as_stages);
      case kOffload: return offloadText(p);
      case kBatch: return batchText(p);
      case kCheckpointing: return p.gradient_checkpointing ? QStringLiteral("on") : QStringLiteral("off");
      case kBucket: return bucketText(p);
      case kPeak:
      {
        // "114 GiB (≤ 124)": the upper end without its unit when it has the peak's.
        const QString peak = formatBytes(static_cast<double>(d.gpu_total_bytes + d.gpu_nccl_bytes));
        QString upper = formatBytes(static_cast<double>(d.gpu_upper_total_bytes));
        const QString unit = peak.section(QLatin1Char(' '), -1);
        if (upper.endsWith(QLatin1Char(' ') + unit)) upper.chop(unit.size() + 1);
        return QStringLiteral("%1 (≤ %2)").arg(peak, upper);
      }
      case kHeadroom: return formatBytes(headroom);
      case kHostRam: return formatBytes(static_cast<double>(d.host_peak_bytes_per_node));
      case kStepTime: return formatSecondsBand(d.step_time_s, d.time_band.low, d.time_band.high);
      case kTokensPerSecond: return QString::number(d.tokens_per_s, 'f', 0);
      case kMfu: return QStringLiteral("%1 %").arg(100 * d.mfu, 0, 'f', 1);
      case kBottleneck: return QString::fromStdString(d.bottleneck);
      case kNote:
        return row.rejected >= 0 ? QString::fromStdString(m_report.rejected[row.rejected].reason)
                                 : QString();
    }
  }
  if (role == SortRole) {
    switch (column) {
      case kRank: return row.plan + 1;
      case kStage: return p.zero.stage;
      case kOffload: return offloadText(p);
      case kBatch: return static_cast<qlonglong>(p.micro_batch);
      case kCheckpointing: return p.gradient_checkpointing ? 1 : 0;
      case kBucket: return static_cast<qlonglong>(p.zero.stage == 0 ? 0 : p.zero.reduce_bucket_size);
      case kPeak: return static_cast<qlonglong>(d.gpu_total_bytes + d.gpu_nccl_bytes);
      case kHeadroom: return headroom;
      case kHostRam: return static_cast<qlonglong>(d.host_peak_bytes_per_node);
      case kStepTime: return d.step_time_s;
      case kTokensPerSecond: return d.tokens_per_s;
      case kMfu: return d.mfu;
      case kBottleneck: return QString::fromStdString(d.bottleneck);
      case kNote:
        return row.rejected >= 0 ? QString::fromStdString(m_report.rejected[row.rejected].reason)
                                 : QString();
    }
  }
  return {};
}

QVariant PlansTableModel::rejectedRow(const Row& row, int column, int role) const {
  const RejectedFamily& f = m_report.rejected[row.rejected];
  if (role == Qt::ForegroundRole) return QColor(140, 140, 140);
  if (role == Qt::ToolTipRole) {
    return QString::fromStdString(f.family + ": no plan\n" + f.reason);
  }
  if (role == Qt::TextAlignmentRole && column == kStage) {
    return QVariant::fromValue<int>(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::DisplayRole || role == SortRole) {
    switch (column) {
      case kRank:
        return role == SortRole ? QVariant(1000000 + row.rejected) : QVariant(QStringLiteral("–"));
      case kStage: return row.stage >= 0 ? QVariant(row.stage) : QVariant(QString());
      case kOffload: return row.offload;
      case kCheckpointing: return row.checkpointing;
      case kNote: return QStringLiteral("does not fit: %1").arg(QString::fromStdString(f.reason));
      default:
        // Numeric columns sort rejected rows last in ascending order.
        return role == SortRole ? QVariant() : QVariant(QString());
    }
  }
  return {};
}

PlansFilterProxy::PlansFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(PlansTableModel::SortRole);
  setFilterKeyColumn(-1);
  setFilterCaseSensitivity(Qt::CaseInsensitive);
}

void PlansFilterProxy::setShowRejected(bool show) {
  if (show == m_showRejected) return;
  m_showRejected = show;
  invalidateFilter();
}

bool PlansFilterProxy::filterAcceptsRow(int row, const QModelIndex& parent) const {
  const QModelIndex first = sourceModel()->index(row, 0, parent);
  if (!m_showRejected && !first.data(PlansTableModel::FitsRole).toBool()) return false;
  return QSortFilterProxyModel::filterAcceptsRow(row, parent);
}

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
#include "models/validationmodel.h"

#include <QColor>

#include <cmath>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/text.h"
#include "models/format.h"

namespace dsplan::gui {
namespace {

using nlohmann::json;

// Typed reads of one key; each error names the source and the key path.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status Error(const std::string& key, const std::string& what) const {
    return Status::InvalidArgument(fmt::format("{}: key '{}' {}", source_, key, what));
  }
  Status Missing(const std::string& key) const {
    return Error(key, "is missing (a `dsplan validate --json` report has it)");
  }
  Status Number(const json& o, const std::string& name, const std::string& path, double* out,
                bool required) const {
    auto it = o.find(name);
    if (it == o.end()) return required ? Missing(path) : Status();
    if (!it->is_number()) return Error(path, "must be a number, got " + ShowJson(*it, 40));
    *out = it->get<double>();
    if (!std::isfinite(*out)) return Error(path, "must be a finite number");
    return Status();
  }
  Status Bool(const json& o, const std::string& name, const std::string& path, bool* out,
              bool required) const {
    auto it = o.find(name);
    if (it == o.end()) return required ? Missing(path) : Status();
    if (!it->is_boolean()) return Error(path, "must be true or false, got " + ShowJson(*it, 40));
    *out = it->get<bool>();
    return Status();
  }
  Status String(const json& o, const std::string& name, const std::string& path, QString* out,
                bool required) const {
    auto it = o.find(name);
    if (it == o.end()) return required ? Missing(path) : Status();
    if (!it->is_string()) return Error(path, "must be a string, got " + ShowJson(*it, 40));
    *out = QString::fromStdString(it->get<std::string>());
    return Status();
  }
  Status Int(const json& o, const std::string& name, const std::string& path, qint64* out) const {
    double v = 0;
    DSPLAN_RETURN_IF_ERROR(Number(o, name, path, &v, false));
    if (v < 0 || v > 1e15 || v != std::floor(v)) {
      if (o.contains(name)) return Error(path, "must be a non-negative integer");
    }
    *out = static_cast<qint64>(v);
    return Status();
  }

 private:
  std::string source_;
};

}  // namespace

const ValidationRowValue* ValidationData::row(const QString& quantity) const {
  for (const ValidationRowValue& r : rows) {
    if (r.quantity == quantity) return &r;
  }
  return nullptr;
}

Result<ValidationData> ParseValidationReport(const std::string& text, const QString& source) {
  const std::string src = source.toStdString();
  DSPLAN_ASSIGN_OR_RETURN(json j, ParseJsonText(text, src));
  if (!j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("{}: not a `dsplan validate --json` report (the top level is not an object)", src));
  }
  // Other dsplan reports, named so that the user knows what was opened instead.
  if (j.contains("schema") && j["schema"].is_string()) {
    return Status::InvalidArgument(fmt::format(
        "{}: a {} report, not a `dsplan validate --json` report (key 'schema')", src,
        j["schema"].get<std::string>()));
  }
  if (j.contains("losses")) {
    return Status::InvalidArgument(fmt::format(
        "{}: a `dsplan validate --executor host` report (key 'losses'); it compares losses, not "
        "predicted and measured time and memory; open a GPU `dsplan validate --json` report",
        src));
  }
  if (j.contains("initial_loss")) {
    return Status::InvalidArgument(fmt::format(
        "{}: a `dsplan validate --copy-task` report (key 'initial_loss'); it has no predicted "
        "rows; open a GPU `dsplan validate --json` report",
        src));
  }
  Reader rd(src);
  ValidationData d;
  d.path = source;
  DSPLAN_RETURN_IF_ERROR(rd.Bool(j, "pass", "pass", &d.pass, true));
  DSPLAN_RETURN_IF_ERROR(rd.String(j, "verdict", "verdict", &d.verdict, true));
  DSPLAN_RETURN_IF_ERROR(rd.Bool(j, "out_of_memory", "out_of_memory", &d.outOfMemory, true));
  DSPLAN_RETURN_IF_ERROR(rd.String(j, "oom", "oom", &d.oom, false));
  auto rows = j.find("rows");
  if (rows == j.end()) return rd.Missing("rows");
  if (!rows->is_array()) return rd.Error("rows", "must be an array of rows");
  constexpr size_t kMaxRows = 1000;
  if (rows->size() > kMaxRows) return rd.Error("rows", fmt::format("has more than {} rows", kMaxRows));
  for (size_t i = 0; i < rows->size(); ++i) {
    const json& r = (*rows)[i];
    const std::string at = fmt::format("rows[{}]", i);
    if (!r.is_object()) return rd.Error(at, "must be an object");
    ValidationRowValue v;
    DSPLAN_RETURN_IF_ERROR(rd.String(r, "quantity", at + ".quantity", &v.quantity, true));
    QString unit;
    DSPLAN_RETURN_IF_ERROR(rd.String(r, "unit", at + ".unit", &unit, true));
    if (unit != QStringLiteral("s") && unit != QStringLiteral("bytes")) {
      return rd.Error(at + ".unit", fmt::format("must be \"s\" or \"bytes\", got {}",
                                                ShowJson(r["unit"], 40)));
    }
    v.bytes = unit == QStringLiteral("bytes");
    DSPLAN_RETURN_IF_ERROR(rd.Number(r, "predicted", at + ".predicted", &v.predicted, true));
    DSPLAN_RETURN_IF_ERROR(rd.Number(r, "measured", at + ".measured", &v.measured, true));
    if (v.predicted < 0) return rd.Error(at + ".predicted", "must not be negative");
    if (v.measured < 0) return rd.Error(at + ".measured", "must not be negative");
    auto e = r.find("error");
    if (e == r.end()) return rd.Missing(at + ".error");
    if (!e->is_null()) {
      DSPLAN_RETURN_IF_ERROR(rd.Number(r, "error", at + ".error", &v.error, true));
      v.hasError = true;
    }
    DSPLAN_RETURN_IF_ERROR(rd.Bool(r, "judged", at + ".judged", &v.judged, true));
    d.rows.push_back(v);
  }
  auto steps = j.find("step_s");
  if (steps == j.end()) return rd.Missing("step_s");
  if (!steps->is_array() || steps->size() > 100000) {
    return rd.Error("step_s", "must be an array of step times in seconds");
  }
  for (size_t i = 0; i < steps->size(); ++i) {
    const json& s = (*steps)[i];
    if (!s.is_number() || !std::isfinite(s.get<double>()) || s.get<double>() < 0) {
      return rd.Error(fmt::format("step_s[{}]", i), "must be a non-negative number of seconds");
    }
    d.stepSeconds.push_back(s.get<double>());
  }
  auto dev = j.find("device");
  if (dev == j.end()) return rd.Missing("device");
  if (!dev->is_object()) return rd.Error("device", "must be an object");
  DSPLAN_RETURN_IF_ERROR(rd.String(*dev, "name", "device.name", &d.deviceName, true));
  qint64 world = 1;
  DSPLAN_RETURN_IF_ERROR(rd.Int(*dev, "world_size", "device.world_size", &world));
  d.worldSize = static_cast<int>(std::max<qint64>(1, std::min<qint64>(world, 1 << 20)));
  if (!d.outOfMemory && d.rows.isEmpty()) return rd.Error("rows", "is empty");
  // What the CLI adds (optional: ValidationToJson alone does not write them).
  DSPLAN_RETURN_IF_ERROR(rd.String(j, "model", "model", &d.model, false));
  DSPLAN_RETURN_IF_ERROR(rd.String(j, "plan", "plan", &d.plan, false));
  DSPLAN_RETURN_IF_ERROR(rd.String(j, "profile", "profile", &d.profile, false));
  DSPLAN_RETURN_IF_ERROR(rd.String(j, "software_stack", "software_stack", &d.softwareStack, false));
  DSPLAN_RETURN_IF_ERROR(rd.Int(j, "micro_batch", "micro_batch", &d.microBatch));
  DSPLAN_RETURN_IF_ERROR(rd.Int(j, "grad_accum", "grad_accum", &d.gradAccum));
  DSPLAN_RETURN_IF_ERROR(rd.Int(j, "seq_len", "seq_len", &d.seqLen));
  DSPLAN_RETURN_IF_ERROR(rd.Int(j, "target_len", "target_len", &d.targetLen));
  DSPLAN_RETURN_IF_ERROR(rd.Number(j, "deepspeed_predicted_step_s", "deepspeed_predicted_step_s",
                                   &d.deepspeedPredictedStepSeconds, false));
  DSPLAN_RETURN_IF_ERROR(rd.Number(j, "measured_tokens_per_s_per_gpu",
                                   "measured_tokens_per_s_per_gpu",
                                   &d.measuredTokensPerSecondPerGpu, false));
  DSPLAN_RETURN_IF_ERROR(rd.Number(j, "mfu", "mfu", &d.mfu, false));
  return d;
}

Result<ValidationData> LoadValidationReport(const QString& path) {
  DSPLAN_ASSIGN_OR_RETURN(std::string text,
                          ReadInputFile(path.toStdString(), "dsplan validate report"));
  return ParseValidationReport(text, path);
}

// ---------------------------------------------------------------- model

ValidationRowsModel::ValidationRowsModel(QObject* parent) : QAbstractTableModel(parent) {}

void ValidationRowsModel::setValidation(const ValidationData& data) {
  beginResetModel();
  m_data = data;
  endResetModel();
}

void ValidationRowsModel::clear() {
  beginResetModel();
  m_data = ValidationData{};
  endResetModel();
}

int ValidationRowsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_data.rows.size());
}

int ValidationRowsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant ValidationRowsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return {};
  if (role == Qt::DisplayRole) {
    static const char* kNames[kColumnCount] = {"Quantity", "Predicted", "Measured", "Error",
                                               "Judged"};
    return QString::fromUtf8(kNames[section]);
  }
  if (role == Qt::ToolTipRole) {
    static const char* kTips[kColumnCount] = {
        "Step time (median of the measured steps), busy time per task class (summed over the "
        "step, overlapped or not), and GPU memory",
        "dsplan's prediction for the plan that ran (dsplan's runtime)",
        "What the run measured",
        "(predicted − measured) / measured",
        "Counts toward the PASS/FAIL verdict"};
    return QString::fromUtf8(kTips[section]);
  }
  return {};
}

QVariant ValidationRowsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= m_data.rows.size() || index.column() >= kColumnCount) {
    return {};
  }
  const ValidationRowValue& r = m_data.rows[index.row()];
  auto value = [&](double v) {
    return r.bytes ? formatBytes(v) : formatSeconds(v);
  };
  // A class with under 0.1 ms on either side has no meaningful ratio (launch noise), as the
  // CLI's table says.
  const bool tiny = !r.bytes && (r.predicted < 1e-4 || r.measured < 1e-4);
  if (role == BytesRole) return r.bytes;
  if (role == Qt::TextAlignmentRole && index.column() != kQuantity) {
    return QVariant::fromValue<int>(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role == Qt::ForegroundRole && index.column() == kError && r.hasError && !tiny) {
    return std::abs(r.error) <= 0.10 ? QColor(0, 120, 0) : QColor(180, 0, 0);
  }
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kQuantity: return r.quantity;
      case kPredicted: return value(r.predicted);
      case kMeasured: return value(r.measured);
      case kError:
        return r.hasError && !tiny ? QStringLiteral("%1%2 %")
                                         .arg(r.error >= 0 ? QStringLiteral("+") : QString())
                                         .arg(100 * r.error, 0, 'f', 1)
                                   : QStringLiteral("–");
      case kJudged: return r.judged ? QStringLiteral("yes") : QString();
    }
  }
  if (role == SortRole) {
    switch (index.column()) {
      case kQuantity: return r.quantity;
      case kPredicted: return r.predicted;
      case kMeasured: return r.measured;
      case kError: return r.hasError ? QVariant(r.error) : QVariant();
      case kJudged: return r.judged ? 1 : 0;
    }
  }
  return {};
}

}  // namespace dsplan::gui

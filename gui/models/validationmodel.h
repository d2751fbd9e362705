// SPDX-License-Identifier: Apache-2.0
// A `dsplan validate --json` report (runtime/validation.cc ValidationToJson plus the fields
// cli/validate_command.cc adds; docs/cli.md "dsplan validate") read back as a value, and an
// item model over its rows: predicted next to measured for the step time, each task class and
// each memory quantity. No widgets here.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <QStringList>
#include <QVector>

#include "core/status.h"

namespace dsplan::gui {

struct ValidationRowValue {
  QString quantity;       // "step time", "forward GEMMs", "peak allocated", ...
  bool bytes = false;     // unit "bytes", else "s"
  double predicted = 0;
  double measured = 0;
  bool hasError = false;  // "error" is a number (null when it is not finite)
  double error = 0;       // (predicted - measured) / measured
  bool judged = false;
};

struct ValidationData {
  QString path;
  bool pass = false;
  QString verdict;
  bool outOfMemory = false;
  QString oom;                       // "OOM at ..." when outOfMemory
  QVector<ValidationRowValue> rows;
  QVector<double> stepSeconds;       // each measured step
  QString deviceName;
  int worldSize = 1;
  // Fields the CLI adds (empty / 0 when absent: older reports).
  QString model, plan, profile, softwareStack;
  qint64 microBatch = 0, gradAccum = 0, seqLen = 0, targetLen = 0;
  double deepspeedPredictedStepSeconds = 0;
  double measuredTokensPerSecondPerGpu = 0;
  double mfu = 0;

  /// The row named |quantity|, or nullptr.
  const ValidationRowValue* row(const QString& quantity) const;
};

/// Reads |path| as a `dsplan validate --json` (GPU executor) report. Errors name the file and
/// the key: unreadable or malformed JSON (with line and column), another dsplan report
/// ("dsplan/plan", "--executor host", "--copy-task"), a missing key or a value of the wrong type.
Result<ValidationData> LoadValidationReport(const QString& path);
/// The same, from text already read (|source| names it in errors).
Result<ValidationData> ParseValidationReport(const std::string& text, const QString& source);

class ValidationRowsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kQuantity, kPredicted, kMeasured, kError, kJudged, kColumnCount };
  enum Role {
    SortRole = Qt::UserRole + 1,  // raw seconds / bytes / error, or the name
    BytesRole,                    // bool: a memory row
  };

  explicit ValidationRowsModel(QObject* parent = nullptr);
  void setValidation(const ValidationData& data);
  void clear();
  const ValidationData& validation() const { return m_data; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  ValidationData m_data;
};

}  // namespace dsplan::gui

// SPDX-License-Identifier: Apache-2.0
#include "models/format.h"

#include <cmath>
#include <cstdio>

#include "core/units.h"

namespace dsplan::gui {

QString formatBytes(double bytes) { return QString::fromStdString(FormatBytes(bytes)); }

QString formatSeconds(double s) {
  if (s == 0) return QStringLiteral("0");
  if (s >= 1.0) return QStringLiteral("%1 s").arg(s, 0, 'f', 3);
  if (s >= 1e-3) return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', s >= 0.1 ? 0 : 2);
  return QStringLiteral("%1 µs").arg(s * 1e6, 0, 'f', 1);
}

QString formatSecondsBand(double s, double low, double high) {
  // The unit and precision of the centre value, applied to the ends.
  double scale = 1;
  int digits = 3;
  QString unit = QStringLiteral("s");
  if (s < 1.0 && s >= 1e-3) {
    scale = 1e3;
    unit = QStringLiteral("ms");
    digits = s >= 0.1 ? 0 : 2;
  } else if (s < 1e-3) {
    scale = 1e6;
    unit = QStringLiteral("µs");
    digits = 1;
  }
  return QStringLiteral("%1 %2 (%3–%4)")
      .arg(s * scale, 0, 'f', digits)
      .arg(unit)
      .arg(low * s * scale, 0, 'f', digits)
      .arg(high * s * scale, 0, 'f', digits);
}

QString stageText(int stage, const std::vector<int>& sameAs) {
  QString t = QString::number(stage);
  for (int o : sameAs) t += QStringLiteral("=%1").arg(o);
  return t;
}

QString offloadText(const Plan& p) {
  if (!p.OffloadsOptimizer() && !p.OffloadsParams()) return QStringLiteral("none");
  QString s = QStringLiteral("opt→%1").arg(OffloadDeviceName(p.zero.offload_optimizer.device));
  if (p.OffloadsParams()) {
    s += QStringLiteral(", par→%1").arg(OffloadDeviceName(p.zero.offload_param.device));
  }
  return s;
}

QString batchText(const Plan& p) {
  return QStringLiteral("%1 × %2 = %3").arg(p.micro_batch).arg(p.grad_accum).arg(p.train_batch());
}

QString bucketText(const Plan& p) {
  if (p.zero.stage == 0) return QStringLiteral("–");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0e", static_cast<double>(p.zero.reduce_bucket_size));
  QString s = QString::fromLatin1(buf);
  s.replace(QStringLiteral("e+0"), QStringLiteral("e"));
  s.replace(QStringLiteral("e+"), QStringLiteral("e"));
  return s;
}

}  // namespace dsplan::gui

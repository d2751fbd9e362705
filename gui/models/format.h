// SPDX-License-Identifier: Apache-2.0
// Formatting shared by the item models and the views: the CLI's units (core/units.h), as QString.
#pragma once

#include <QString>

#include "core/plan.h"

namespace dsplan::gui {

QString formatBytes(double bytes);              // "12.3 GiB"
QString formatSeconds(double seconds);          // "412 ms", "1.23 s", "35 µs"
QString offloadText(const Plan& plan);          // "none", "opt→cpu", "opt→cpu, par→cpu"
QString batchText(const Plan& plan);            // "8 × 4 = 128"
QString bucketText(const Plan& plan);           // "5e8" or "–" at stage 0

}  // namespace dsplan::gui

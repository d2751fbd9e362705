// SPDX-License-Identifier: Apache-2.0
// Formatting shared by the item models and the views: the CLI's units (core/units.h), as QString.
#pragma once

#include <QString>

#include <vector>

#include "core/plan.h"

namespace dsplan::gui {

QString formatBytes(double bytes);              // "12.3 GiB"
QString formatSeconds(double seconds);          // "412 ms", "1.23 s", "35 µs"
/// A time with its band in the same unit: "412 ms (371–494)", "1.23 s (1.11–1.48)".
QString formatSecondsBand(double seconds, double low, double high);
/// "stage 1=2": the stage and the other stages folded into the row (ScoredPlan::same_as_stages,
/// the CLI's "1=2").
QString stageText(int stage, const std::vector<int>& sameAs);
QString offloadText(const Plan& plan);          // "none", "opt→cpu", "opt→cpu, par→cpu"
QString batchText(const Plan& plan);            // "8 × 4 = 128"
QString bucketText(const Plan& plan);           // "5e8" or "–" at stage 0

}  // namespace dsplan::gui

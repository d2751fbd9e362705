// A RunShape with the fields the user fixed marked: what PlannerRequest (planner/search.h) and
// DsConfigContext (planner/ds_config.h) both take, so the run shape reaches the planner and the
// ds_config parser as the one RunShape, not as loose fields.
#ifndef DSPLAN_PLANNER_RUN_SHAPE_PINS_H_
#define DSPLAN_PLANNER_RUN_SHAPE_PINS_H_

#include <cstdint>
#include <optional>

#include "core/plan.h"

namespace dsplan {

/// |shape|'s seq_len, target_len and attention are always used. Its micro_batch,
/// gradient_checkpointing and precision are used only where |shape_pins| pins them (set them
/// with the Pin* calls); unpinned, their values in |shape| are not read, and the user of the
/// struct says what happens instead.
struct PinnedRunShape {
  RunShape shape;
  struct ShapePins {
    bool micro_batch = false;
    bool gradient_checkpointing = false;
    bool precision = false;
  };
  ShapePins shape_pins;

  void PinMicroBatch(int64_t micro_batch) {
    shape.micro_batch = micro_batch;
    shape_pins.micro_batch = true;
  }
  void PinGradientCheckpointing(bool on) {
    shape.gradient_checkpointing = on;
    shape_pins.gradient_checkpointing = true;
  }
  void PinPrecision(Precision precision) {
    shape.precision = precision;
    shape_pins.precision = true;
  }
  /// The pinned value, or none when it was not given.
  std::optional<int64_t> PinnedMicroBatch() const {
    return shape_pins.micro_batch ? std::optional<int64_t>(shape.micro_batch) : std::nullopt;
  }
  std::optional<bool> PinnedGradientCheckpointing() const {
    return shape_pins.gradient_checkpointing ? std::optional<bool>(shape.gradient_checkpointing)
                                             : std::nullopt;
  }
  std::optional<Precision> PinnedPrecision() const {
    return shape_pins.precision ? std::optional<Precision>(shape.precision) : std::nullopt;
  }
};

}  // namespace dsplan

#endif  // DSPLAN_PLANNER_RUN_SHAPE_PINS_H_

// SPDX-License-Identifier: Apache-2.0
// The inputs: model (catalog search that also takes the HF hub id of a catalog model, or a
// config.json), hardware profile, nodes x GPUs, lengths, global batch, precision and the
// planner's pins. "Plan" emits planRequested with the values.
#pragma once

#include <QWidget>

#include "planservice.h"

class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QCheckBox;
class QPushButton;

namespace dsplan::gui {

class InputsPanel : public QWidget {
  Q_OBJECT
 public:
  InputsPanel(const PlanService& service, QWidget* parent = nullptr);
  PlanInputs inputs() const;
  void setModelText(const QString& text);
  void setProfileText(const QString& text);
  void setSeqLen(qint64 tokens);  // 0: the default
  void setCluster(int nodes, int gpusPerNode);
  void setBusy(bool busy);

 signals:
  void planRequested(const dsplan::gui::PlanInputs& inputs);

 private:
  void openConfig();
  void openProfile();

  QComboBox* m_model = nullptr;
  QComboBox* m_profile = nullptr;
  QSpinBox* m_nodes = nullptr;
  QSpinBox* m_gpus = nullptr;
  QSpinBox* m_seqLen = nullptr;
  QSpinBox* m_targetLen = nullptr;
  QSpinBox* m_globalBatch = nullptr;
  QComboBox* m_precision = nullptr;
  QComboBox* m_stage = nullptr;
  QSpinBox* m_microBatch = nullptr;
  QComboBox* m_checkpointing = nullptr;
  QCheckBox* m_noOffload = nullptr;
  QCheckBox* m_noZeroInit = nullptr;
  QSpinBox* m_hostMemory = nullptr;
  QSpinBox* m_nvme = nullptr;
  QComboBox* m_objective = nullptr;
  QPushButton* m_plan = nullptr;
};

}  // namespace dsplan::gui

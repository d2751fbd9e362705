// SPDX-License-Identifier: Apache-2.0
#include "inputspanel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCompleter>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

namespace dsplan::gui {

InputsPanel::InputsPanel(const PlanService& service, QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

  m_model = new QComboBox;
  m_model->setEditable(true);
  m_model->setInsertPolicy(QComboBox::NoInsert);
  QStringList words;
  for (const CatalogEntry& e : service.catalog()) {
    m_model->addItem(QString::fromStdString(e.name));
    m_model->setItemData(m_model->count() - 1,
                         QString::fromStdString(e.hf_id + "\n" + e.description), Qt::ToolTipRole);
    words << QString::fromStdString(e.name) << QString::fromStdString(e.hf_id);
  }
  auto* completer = new QCompleter(words, m_model);
  completer->setCaseSensitivity(Qt::CaseInsensitive);
  completer->setFilterMode(Qt::MatchContains);
  m_model->setCompleter(completer);
  m_model->setToolTip(tr("A catalog name, the HuggingFace hub id of a catalog model, or a path "
                         "to a config.json (or the folder holding one)"));
  auto* openCfg = new QToolButton;
  openCfg->setText(tr("Open…"));
  openCfg->setToolTip(tr("Open a HuggingFace config.json"));
  connect(openCfg, &QToolButton::clicked, this, &InputsPanel::openConfig);
  auto* modelRow = new QHBoxLayout;
  modelRow->addWidget(m_model, 1);
  modelRow->addWidget(openCfg);
  form->addRow(tr("Model"), modelRow);

  m_profile = new QComboBox;
  m_profile->setEditable(true);
  m_profile->addItems(service.profileNames());
  m_profile->setCurrentText(service.defaultProfile());
  auto* openProf = new QToolButton;
  openProf->setText(tr("Open…"));
  openProf->setToolTip(tr("Open a hardware profile YAML"));
  connect(openProf, &QToolButton::clicked, this, &InputsPanel::openProfile);
  auto* profRow = new QHBoxLayout;
  profRow->addWidget(m_profile, 1);
  profRow->addWidget(openProf);
  form->addRow(tr("Hardware"), profRow);

  auto spin = [](int lo, int hi, int value, const QString& special = {}) {
    auto* s = new QSpinBox;
    s->setRange(lo, hi);
    s->setValue(value);
    if (!special.isEmpty()) s->setSpecialValueText(special);
    return s;
  };
  m_nodes = spin(1, 4096, 1);
  m_gpus = spin(1, 64, 4);
  auto* cluster = new QHBoxLayout;
  cluster->addWidget(m_nodes);
  cluster->addWidget(new QLabel(tr("nodes ×")));
  cluster->addWidget(m_gpus);
  cluster->addWidget(new QLabel(tr("GPUs")));
  form->addRow(tr("Cluster"), cluster);

  m_seqLen = spin(0, 1 << 20, 0, tr("default"));
  m_seqLen->setSingleStep(128);
  m_seqLen->setSuffix(tr(" tokens"));
  m_seqLen->setToolTip(tr("Tokens per sample (T5: encoder). Default: 512 for T5 and BERT, else 1024"));
  form->addRow(tr("Sequence"), m_seqLen);
  m_targetLen = spin(0, 1 << 20, 0, tr("default"));
  m_targetLen->setSuffix(tr(" tokens"));
  m_targetLen->setToolTip(tr("T5 decoder length (default 128); ignored for other models"));
  form->addRow(tr("Target (T5)"), m_targetLen);
  m_globalBatch = spin(0, 1 << 24, 0, tr("any"));
  m_globalBatch->setToolTip(tr("Samples per optimizer step: micro-batch × accumulation × GPUs"));
  form->addRow(tr("Global batch"), m_globalBatch);
  m_precision = new QComboBox;
  m_precision->addItem(tr("auto"), QString());
  m_precision->setToolTip(tr("auto: bf16 where the GPU has it, else fp16"));
  m_precision->addItem(QStringLiteral("bf16"), QStringLiteral("bf16"));
  m_precision->addItem(QStringLiteral("fp16"), QStringLiteral("fp16"));
  m_precision->addItem(QStringLiteral("fp32"), QStringLiteral("fp32"));
  form->addRow(tr("Precision"), m_precision);

  auto* pins = new QLabel(tr("<b>Pins</b> (unset = searched)"));
  form->addRow(pins);
  m_stage = new QComboBox;
  m_stage->addItem(tr("any"), -1);
  for (int s = 0; s <= 3; ++s) m_stage->addItem(QString::number(s), s);
  form->addRow(tr("ZeRO stage"), m_stage);
  m_microBatch = spin(0, 4096, 0, tr("any"));
  form->addRow(tr("Micro-batch"), m_microBatch);
  m_checkpointing = new QComboBox;
  m_checkpointing->addItem(tr("any"), -1);
  m_checkpointing->addItem(tr("off"), 0);
  m_checkpointing->addItem(tr("on"), 1);
  form->addRow(tr("Checkpointing"), m_checkpointing);
  m_noOffload = new QCheckBox(tr("no offload"));
  form->addRow(tr("Offload"), m_noOffload);
  m_noZeroInit = new QCheckBox(tr("built outside deepspeed.zero.Init"));
  m_noZeroInit->setObjectName(QStringLiteral("noZeroInit"));
  m_noZeroInit->setToolTip(
      tr("ZeRO-3: the script builds the model outside deepspeed.zero.Init and passes it to "
         "deepspeed.initialize (HF Trainer and accelerate build it inside). DeepSpeed 0.14.5 then "
         "keeps every nn.Linear weight gathered in the forward until its backward "
         "(the CLI's --no-zero-init)"));
  form->addRow(tr("Model"), m_noZeroInit);
  m_hostMemory = spin(0, 1 << 20, 0, tr("profile's"));
  m_hostMemory->setSuffix(tr(" GiB"));
  form->addRow(tr("Host RAM/node"), m_hostMemory);
  m_nvme = spin(0, 1 << 20, 0, tr("none"));
  m_nvme->setSuffix(tr(" GiB"));
  m_nvme->setToolTip(tr("NVMe space per node for ZeRO-Infinity (none: no NVMe offload)"));
  form->addRow(tr("NVMe/node"), m_nvme);
  m_objective = new QComboBox;
  m_objective->addItem(tr("throughput"), QStringLiteral("throughput"));
  m_objective->addItem(tr("memory"), QStringLiteral("memory"));
  m_objective->addItem(tr("cost"), QStringLiteral("cost"));
  form->addRow(tr("Objective"), m_objective);

  m_plan = new QPushButton(tr("Plan"));
  m_plan->setDefault(true);
  m_plan->setObjectName(QStringLiteral("planButton"));
  connect(m_plan, &QPushButton::clicked, this, [this] { emit planRequested(inputs()); });
  connect(m_model->lineEdit(), &QLineEdit::returnPressed, m_plan, &QPushButton::click);

  auto* v = new QVBoxLayout(this);
  v->addLayout(form);
  v->addWidget(m_plan);
  v->addStretch(1);
}

PlanInputs InputsPanel::inputs() const {
  PlanInputs in;
  in.model = m_model->currentText().trimmed();
  in.profile = m_profile->currentText().trimmed();
  in.nodes = m_nodes->value();
  in.gpusPerNode = m_gpus->value();
  in.seqLen = m_seqLen->value();
  in.targetLen = m_targetLen->value();
  in.globalBatch = m_globalBatch->value();
  in.precision = m_precision->currentData().toString();
  in.stage = m_stage->currentData().toInt();
  in.microBatch = m_microBatch->value();
  in.checkpointing = m_checkpointing->currentData().toInt();
  in.noOffload = m_noOffload->isChecked();
  in.noZeroInit = m_noZeroInit->isChecked();
  in.hostMemoryBytes = static_cast<qint64>(m_hostMemory->value()) << 30;
  in.nvmeBytes = static_cast<qint64>(m_nvme->value()) << 30;
  in.objective = m_objective->currentData().toString();
  return in;
}

void InputsPanel::setModelText(const QString& text) { m_model->setCurrentText(text); }

void InputsPanel::setProfileText(const QString& text) { m_profile->setCurrentText(text); }

void InputsPanel::setSeqLen(qint64 tokens) { m_seqLen->setValue(static_cast<int>(tokens)); }

void InputsPanel::setCluster(int nodes, int gpusPerNode) {
  m_nodes->setValue(nodes);
  m_gpus->setValue(gpusPerNode);
}

void InputsPanel::setBusy(bool busy) { m_plan->setText(busy ? tr("Plan (running…)") : tr("Plan")); }

void InputsPanel::openConfig() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a HuggingFace config.json"), {},
                                                    tr("JSON (*.json);;All files (*)"));
  if (!path.isEmpty()) setModelText(path);
}

void InputsPanel::openProfile() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a hardware profile"), {},
                                                    tr("YAML (*.yaml *.yml);;All files (*)"));
  if (!path.isEmpty()) m_profile->setCurrentText(path);
}

}  // namespace dsplan::gui

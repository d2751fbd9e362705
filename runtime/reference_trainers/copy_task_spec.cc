// The copy task's tiny default model, shared by the CUDA and no-CUDA builds.
#include "runtime/reference_trainers/copy_task.h"

namespace dsplan {

ModelSpec TinyCopyTaskSpec() {
  ModelSpec s;
  s.name = "gpt2-tiny-copy";
  s.model_type = "gpt2";
  s.family = Family::kGpt2;
  s.vocab_size = 64;
  s.hidden_size = 128;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 4;
  s.head_dim = 32;
  s.intermediate_size = 512;
  s.max_positions = 64;
  s.activation = Activation::kGeluNew;
  s.norm_eps = 1e-5;
  s.tie_word_embeddings = true;
  return s;
}

}  // namespace dsplan

// One trace function per transformers model family; each mirrors the family's modeling_*.py
// forward in train mode. Called only by BuildWorkload.
#ifndef DSPLAN_SIMULATOR_FAMILIES_FAMILIES_H_
#define DSPLAN_SIMULATOR_FAMILIES_FAMILIES_H_

#include "simulator/tracer.h"

namespace dsplan {

void TraceDecoderOnly(Tracer& tr);  // gpt2, gptj, gpt_neox, opt, bloom, llama-likes, falcon, phi
void TraceT5(Tracer& tr);
void TraceBert(Tracer& tr);

}  // namespace dsplan

#endif  // DSPLAN_SIMULATOR_FAMILIES_FAMILIES_H_

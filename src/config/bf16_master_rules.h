// bf16_master_rules.h -- which configurations of DeepSpeed's lower-memory bf16 mode
// (bf16.bf16_master_weights_and_grads, bf16.bf16_optimizer_states) run, following DeepSpeed
// 0.19.8's checks (runtime/config.py and the ZeRO optimizers' master-weight validation).
#pragma once

#include "config/train_config.h"
#include "util/status.h"

namespace dsrt {

// OK when neither key is set or the combination runs. CONFIG where DeepSpeed refuses it too (stage
// 0; bf16_optimizer_states without bf16_master_weights_and_grads; bf16 masters with fp32 states or
// with optimizer offload but no CPU Adam/AdamW), naming the keys and what to change. UNSUPPORTED
// where DeepSpeed runs it and dsrt does not (a partial offload ratio < 1), or where dsrt asks more
// than DeepSpeed (bf16.enabled false). NVMe optimizer offload runs with bf16 arrays in the swap
// files, at stages 1-3 like dsrt's NVMe offload without the keys (DeepSpeed: stage 3 only).
Status check_bf16_master_rules(const TrainConfig &config);

}  // namespace dsrt

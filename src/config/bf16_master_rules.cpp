// defines: check_bf16_master_rules (see the header).
#include "config/bf16_master_rules.h"

namespace dsrt {
namespace {

const char *type_text(OptimizerType type) {
  switch (type) {
    case OptimizerType::Adam: return "Adam";
    case OptimizerType::AdamW: return "AdamW";
    case OptimizerType::SGD: return "SGD";
    case OptimizerType::Lamb: return "Lamb";
    case OptimizerType::Adagrad: return "Adagrad";
    case OptimizerType::Lion: return "Lion";
    case OptimizerType::OneBitAdam: return "OneBitAdam";
    case OptimizerType::ZeroOneAdam: return "ZeroOneAdam";
    case OptimizerType::OneBitLamb: return "OneBitLamb";
  }
  return "unknown";
}

}  // namespace

Status check_bf16_master_rules(const TrainConfig &c) {
  const bool master = c.bf16_master_weights, states = c.bf16_optimizer_states;
  if (!master && !states) return Status::Ok();
  const char *key = master ? "bf16.bf16_master_weights_and_grads" : "bf16.bf16_optimizer_states";
  if (states && !master)
    return Error(DSRT_ERR_CONFIG,
                 "bf16.bf16_optimizer_states requires bf16.bf16_master_weights_and_grads (as in DeepSpeed); set "
                 "both to true, or bf16_optimizer_states to false");
  if (c.zero.stage < 1 || c.zero.stage > 3)
    return Error(DSRT_ERR_CONFIG, "%s is only supported with ZeRO stage 1, 2 or 3 (as in DeepSpeed); the stage is %d",
                 key, c.zero.stage);
  if (!c.bf16_enabled)
    return Error(DSRT_ERR_UNSUPPORTED,
                 "%s needs bf16.enabled true in dsrt (bf16 masters of a model trained in another precision are not "
                 "implemented); enable bf16 or remove the key",
                 key);
  const OffloadDevice offload = c.zero.offload_optimizer.device;
  // DeepSpeed: bf16 masters need ZeRO-Offload with DeepSpeedCPUAdam whenever the states are fp32
  // (they cannot stay on the accelerator) or when optimizer offload is on at all.
  if (!states || offload != OffloadDevice::None) {
    if (offload == OffloadDevice::None)
      return Error(DSRT_ERR_CONFIG,
                   "bf16.bf16_master_weights_and_grads without bf16.bf16_optimizer_states needs "
                   "zero_optimization.offload_optimizer.device \"cpu\" (DeepSpeed: fp32 optimizer states with bf16 "
                   "masters run only on ZeRO-Offload's CPU Adam); offload the optimizer, or set "
                   "bf16.bf16_optimizer_states to true");
    if (c.optimizer.type != OptimizerType::Adam && c.optimizer.type != OptimizerType::AdamW)
      return Error(DSRT_ERR_CONFIG,
                   "bf16.bf16_master_weights_and_grads with optimizer offload needs optimizer Adam or AdamW "
                   "(DeepSpeed: DeepSpeedCPUAdam only); the optimizer is %s",
                   type_text(c.optimizer.type));
    if (c.zero.offload_optimizer.ratio < 1.0)
      return Error(DSRT_ERR_UNSUPPORTED,
                   "bf16.bf16_master_weights_and_grads with a partial optimizer offload (ratio %g < 1) is not "
                   "implemented; remove offload_optimizer.ratio",
                   c.zero.offload_optimizer.ratio);
  }
  return Status::Ok();
}

}  // namespace dsrt

// config_rules.h -- every refusal that depends on the configuration alone, in one place.
//
// Config::resolve runs check_train_config on what it produced, so `dsrt config check`,
// dsrt_config_check and dsrt_engine_create refuse the same configs with the same message; the
// engine runs it again on the TrainConfig it is given (C++ callers build one by hand). Refusals
// that need runtime facts (the world size's batch rule aside: the tensors' sizes, the device, the
// communicator) stay where those facts are known; docs/config.md lists them.
//
// Most of these rules can only fail for a hand-built TrainConfig: from JSON, the schema's ranges
// refuse the value first (with the schema's message). Those that JSON can reach are exercised by
// tests/configs/refusals (one config per rule, checked by test_config_refusals).
#pragma once

#include "config/train_config.h"
#include "util/status.h"

namespace dsrt {

// The loss-scaling keys (only read when fp16 is enabled).
Status check_fp16_config(const Fp16Config &fp16, bool fp16_enabled);

// The scheduler's keys for its type; base_lr is optimizer.params.lr (the schedules scale it).
Status check_scheduler_config(const SchedulerConfig &scheduler, double base_lr);

// Everything the engine refuses about a resolved configuration: the two above, and the rules
// across sections (precision, stages, bucket sizes, optimizer and offload combinations).
Status check_train_config(const TrainConfig &config);

}  // namespace dsrt

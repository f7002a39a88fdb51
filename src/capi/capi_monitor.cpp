// defines: the dsrt_engine_* monitor entry points (report_loss, report_host_time, events).
#include "capi/guard.h"
#include "capi/handles.h"
#include "engine/engine.h"
#include "monitor/monitor_events.h"
#include "capi/features.h"

namespace dsrt {
namespace {

Status monitor_engine(const dsrt_engine *handle, Engine **out) {
  if (handle == nullptr || !handle->impl)
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s: the engine handle is NULL", current_api_function());
  *out = handle->impl.get();
  return Status::Ok();
}

}  // namespace
}  // namespace dsrt

extern "C" {

DSRT_API dsrt_status dsrt_engine_report_loss(dsrt_engine *engine, double loss) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    dsrt::Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::monitor_engine(engine, &e));
    return e->report_loss(loss);
  });
}

DSRT_API dsrt_status dsrt_engine_report_host_time(dsrt_engine *engine, int32_t phase, double seconds) {
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    dsrt::Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::monitor_engine(engine, &e));
    return e->report_host_time(phase, seconds);
  });
}

DSRT_API dsrt_status dsrt_engine_events(const dsrt_engine *engine, char **out) {
  if (out != nullptr) *out = nullptr;
  return dsrt::guarded(__func__, [&]() -> dsrt::Status {
    dsrt::Engine *e = nullptr;
    DSRT_RETURN_IF_ERROR(dsrt::monitor_engine(engine, &e));
    DSRT_REQUIRE_ARG(out);
    if (!e->built()) return dsrt::Error(DSRT_ERR_STATE, "dsrt_engine_events: the engine is not built yet");
    *out = dsrt::dup_for_caller(dsrt::events_text(e->events()));
    if (*out == nullptr) return dsrt::Error(DSRT_ERR_OUT_OF_MEMORY, "dsrt_engine_events: out of memory");
    return dsrt::Status::Ok();
  });
}

}  // extern "C"

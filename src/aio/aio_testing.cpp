// defines: the fault-injection hooks of aio_testing.h (they arm the engine's FaultPlan).
#include "aio/aio_testing.h"

#include "aio/aio_internal.h"

namespace dsrt {

void aio_testing_fail_request(AioEngine &engine, uint64_t nth, int error) {
  aio_detail::Engine &impl = engine.impl();
  impl.faults.fail_errno.store(error);
  impl.faults.fail_at.store(nth == 0 ? 0 : impl.submitted.load() + nth);
}

void aio_testing_short_transfers(AioEngine &engine, bool enabled) {
  engine.impl().faults.short_transfers.store(enabled);
}

void aio_testing_fail_ring_enter(AioEngine &engine, int after, int count, int error, int setup_failures) {
  aio_detail::FaultPlan &faults = engine.impl().faults;
  faults.enter_errno.store(error);
  faults.enter_skip.store(after);
  faults.setup_failures.store(setup_failures);
  faults.enter_failures.store(count);
}

void aio_testing_refuse_direct(AioEngine &engine, bool enabled) { engine.impl().faults.refuse_direct.store(enabled); }

}  // namespace dsrt

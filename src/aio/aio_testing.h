// aio_testing.h -- fault injection for tests (internal; never in the public header).
#pragma once

#include <cstdint>

#include "aio/aio_engine.h"

namespace dsrt {

// Makes the nth request submitted from now on (1 = the next one) fail with `error` as its first
// piece (the one at the request's offset) is issued, without touching the file. The result takes
// the path a kernel result takes (a NOP completion on io_uring), so EIO or ENOSPC fail the request
// (later pieces are dropped, exactly as for a real failure) and EINTR or EAGAIN make the piece be
// issued again. nth = 0 disarms the hook.
void aio_testing_fail_request(AioEngine &engine, uint64_t nth, int error);

// While enabled, the first transfer of every piece of every request submitted reports about half
// of its bytes, as a short read or write would; the count ends off any 512-byte boundary, so an
// O_DIRECT piece has to continue from an unaligned position. The engine must carry on from there.
void aio_testing_short_transfers(AioEngine &engine, bool enabled);

// Of the io_uring_enter calls that submit (on any ring), lets `after` through and then fails the
// next `count` with `error` before they reach the kernel, as under memory pressure (with after > 0
// the failing call finds earlier pieces still in flight); the next `setup_failures` ring
// re-creations fail with ENOMEM. No effect on the threads backend.
void aio_testing_fail_ring_enter(AioEngine &engine, int after, int count, int error, int setup_failures = 0);

// While enabled, files opened afterwards behave as on a file system that refuses O_DIRECT.
void aio_testing_refuse_direct(AioEngine &engine, bool enabled);

}  // namespace dsrt

#include "aio/aio_features.h"

#ifdef DSRT_HAVE_URING
#include <liburing.h>
#endif

namespace dsrt {
bool aio_has_io_uring() {
#ifdef DSRT_HAVE_URING
  static const bool available = [] {
    struct io_uring ring;
    if (io_uring_queue_init(2, &ring, 0) != 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
#else
  return false;
#endif
}
}  // namespace dsrt

#pragma once
namespace dsrt {
bool aio_has_io_uring();  // built with liburing and the kernel lets this process create a ring
}  // namespace dsrt

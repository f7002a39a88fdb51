// gloo_comm_make.h -- the Gloo communicator class behind tcp_comm_create (gloo_create.cpp), made
// over a connected context (null in a world of one). Only with DSRT_HAVE_GLOO.
#pragma once

#ifdef DSRT_HAVE_GLOO
#include <gloo/context.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/gloo/gloo_comm.h"

namespace dsrt {

// host: the address peers reach this rank at (for split's new meshes).
std::shared_ptr<Comm> gloo_comm_make(int rank, int size, std::shared_ptr<gloo::Context> context, double timeout_s,
                                     std::string host);
// Before the first collective of a comm from gloo_comm_make: every pair carries token both ways,
// so a stranger that took a pair's place in Gloo's listener is found now.
Status gloo_comm_check_pairs(Comm &comm, uint64_t token, double timeout_s);

}  // namespace dsrt
#endif

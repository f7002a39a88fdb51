// gloo_split.h -- the Gloo mesh of a communicator made by split(): a fresh Gloo context among the
// ranks of one color, its pair addresses exchanged through a store whose one round is an
// all-gather over the parent communicator (every parent rank joins that round, whatever its
// color), under keys prefixed by the split's sequence number and color.
#pragma once

#include <memory>
#include <string>

#include <gloo/context.h>

#include "comm/comm_split.h"

namespace dsrt {

// Collective over parent. host: the address peers reach this rank at. *out is null for a group of
// one (which needs no mesh but still joins the round).
Status gloo_split_mesh(Comm &parent, const std::string &host, const SplitPlan &plan, const std::string &prefix,
                       double timeout_s, std::shared_ptr<gloo::Context> *out);

}  // namespace dsrt

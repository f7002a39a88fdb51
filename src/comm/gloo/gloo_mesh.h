// gloo_mesh.h -- Gloo's full mesh for the tcp communicator: a TCP device on the address peers
// reach this host at, one pair per peer, connected after one exchange of pair addresses through
// a store (gloo_store.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/rendezvous/store.h>

namespace dsrt {

// Creates the device and pairs, publishes this rank's pair addresses under prefix + rank, reads
// every peer's, connects (each step bounded by timeout_s). Throws Gloo's exceptions, or the
// store's on a rendezvous failure.
std::shared_ptr<gloo::Context> gloo_connect_full_mesh(gloo::rendezvous::Store &store, const std::string &host,
                                                      int rank, int world, double timeout_s,
                                                      const std::string &prefix);

// The port of Gloo's listener in the pair addresses a rank publishes (0 if unreadable).
int gloo_listening_port(const std::vector<char> &addresses, int world);

}  // namespace dsrt

// defines: gloo_connect_full_mesh (MeshContext: the pairs connected after one store exchange)
// and gloo_listening_port.
#include "comm/gloo/gloo_mesh.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <gloo/common/error.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>

#include "util/status.h"

namespace dsrt {
namespace {

// A Gloo context whose full mesh is formed in one store exchange: every rank creates its pairs,
// publishes their addresses under its rank, reads everyone's, then connects. (Gloo's own
// connectFullMesh reads keys between blocking connects, which a store made of collective rounds
// cannot serve.)
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}

  // Keys are prefix + rank, so every attempt publishes under fresh keys.
  void connect_full_mesh(gloo::rendezvous::Store &store, const std::shared_ptr<gloo::transport::Device> &device,
                         const std::string &prefix) {
    auto transport = device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    std::vector<char> mine;
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      std::vector<char> address = transport->createPair(p)->address().bytes();
      mine.insert(mine.end(), address.begin(), address.end());
    }
    store.set(prefix + std::to_string(rank), mine);
    std::vector<std::string> keys;
    for (int p = 0; p < size; ++p)
      if (p != rank) keys.push_back(prefix + std::to_string(p));
    store.wait(keys, getTimeout());
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      std::vector<char> theirs = store.get(prefix + std::to_string(p));
      const size_t one = theirs.size() / static_cast<size_t>(size - 1);
      if (one == 0 || theirs.size() % static_cast<size_t>(size - 1) != 0)
        throw gloo::IoException(Format("rank %d published %zu bytes of addresses for %d peers", p, theirs.size(),
                                       size - 1));
      const size_t index = static_cast<size_t>(rank < p ? rank : rank - 1);
      transport->getPair(p)->connect(
          std::vector<char>(theirs.begin() + index * one, theirs.begin() + (index + 1) * one));
    }
    device_ = device;
    transportContext_ = std::move(transport);
  }
};

}  // namespace

// The port of Gloo's listener, read from the first pair address this rank publishes.
int gloo_listening_port(const std::vector<char> &addresses, int world) {
  if (world < 2 || addresses.empty() || addresses.size() % static_cast<size_t>(world - 1) != 0) return 0;
  size_t one = addresses.size() / static_cast<size_t>(world - 1);
  gloo::transport::tcp::Address address(std::vector<char>(addresses.begin(), addresses.begin() + one));
  const sockaddr_storage &ss = address.getSockaddr();
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in *>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6 *>(&ss)->sin6_port);
  return 0;
}

std::shared_ptr<gloo::Context> gloo_connect_full_mesh(gloo::rendezvous::Store &store, const std::string &host,
                                                      int rank, int world, double timeout_s,
                                                      const std::string &prefix) {
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<MeshContext>(rank, world);
  context->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  context->connect_full_mesh(store, device, prefix);
  return context;
}

}  // namespace dsrt

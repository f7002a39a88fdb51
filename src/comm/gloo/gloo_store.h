// gloo_store.h -- Gloo's key-value store interface over dsrt's TCP rendezvous, so Gloo's full
// mesh is bootstrapped from MASTER_ADDR and the rendezvous port like every other torchrun world.
//
// The rendezvous is a one-shot all-gather, so the store works in rounds: set() records a key
// locally; a get() or wait() of a key this rank does not have yet runs rounds (each an all-gather
// of the keys every rank set since the last one) until the key arrives. Rounds are collective, so
// a rank that has what it needs keeps joining them in finish() until every rank has said it is
// done. Errors are kept as a Status (error()) and thrown to Gloo as gloo::IoException.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/tcp_rendezvous.h"
#include "util/status.h"

namespace dsrt {

class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  // token: this rank's candidate job token (rank 0's wins); on_set sees every local set().
  RendezvousStore(RendezvousOptions options, int rank, int world, uint64_t token,
                  std::function<void(const std::string &key, const std::vector<char> &value)> on_set = nullptr);

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override;

  // Joins rounds until every rank has called finish(); call it once Gloo no longer needs the store.
  Status finish();

  const Status &error() const { return error_; }
  uint64_t token() const { return token_; }  // rank 0's, once a round has run

 private:
  Status round(bool done, std::chrono::steady_clock::time_point deadline, bool *all_done);
  Status wait_for(const std::vector<std::string> &keys, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(Status status);

  const RendezvousOptions options_;
  const int rank_, world_;
  uint64_t token_;
  const std::chrono::steady_clock::time_point deadline_;
  std::function<void(const std::string &, const std::vector<char> &)> on_set_;
  std::map<std::string, std::vector<char>> table_;    // every key seen (local and published)
  std::map<std::string, std::vector<char>> pending_;  // set here since the last round
  int rounds_ = 0;
  Status error_;
};

}  // namespace dsrt

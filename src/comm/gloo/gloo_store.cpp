// defines: RendezvousStore -- Gloo's store as rounds of the TCP rendezvous all-gather. A round's
// contribution is "dsrt-gloo1", a done flag, the rank's token and the keys it set since the last
// round, each length-prefixed.
#include "comm/gloo/gloo_store.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <cstring>

namespace dsrt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kTag[] = "dsrt-gloo1";
constexpr size_t kTagBytes = sizeof kTag - 1;

void put_u64(std::string *out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (56 - 8 * i)));
}
bool get_u64(const std::string &in, size_t *at, uint64_t *v) {
  if (in.size() - *at < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v = (*v << 8) | static_cast<uint8_t>(in[*at + i]);
  *at += 8;
  return true;
}
bool get_bytes(const std::string &in, size_t *at, std::string *out) {
  uint64_t n = 0;
  if (!get_u64(in, at, &n) || in.size() - *at < n) return false;
  out->assign(in, *at, n);
  *at += n;
  return true;
}

}  // namespace

RendezvousStore::RendezvousStore(RendezvousOptions options, int rank, int world, uint64_t token,
                                 std::function<void(const std::string &, const std::vector<char> &)> on_set)
    : options_(std::move(options)),
      rank_(rank),
      world_(world),
      token_(token),
      deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::min(options_.timeout_s, 1e7)))),
      on_set_(std::move(on_set)) {}

void RendezvousStore::fail(Status status) {
  if (error_.ok()) error_ = status;
  throw gloo::IoException(status.message());
}

void RendezvousStore::set(const std::string &key, const std::vector<char> &data) {
  if (on_set_) on_set_(key, data);
  table_[key] = data;
  pending_[key] = data;
}

std::vector<char> RendezvousStore::get(const std::string &key) {
  wait({key});
  return table_.at(key);
}

void RendezvousStore::wait(const std::vector<std::string> &keys) {
  Status status = wait_for(keys, deadline_);
  if (!status.ok()) fail(status);
}

void RendezvousStore::wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) {
  Status status = wait_for(keys, std::min(deadline_, Clock::now() + timeout));
  if (!status.ok()) fail(status);
}

Status RendezvousStore::wait_for(const std::vector<std::string> &keys, Clock::time_point deadline) {
  if (!error_.ok()) return error_;
  for (;;) {
    auto missing = std::find_if(keys.begin(), keys.end(), [&](const std::string &k) { return !table_.count(k); });
    if (missing == keys.end()) return Status::Ok();
    if (Clock::now() >= deadline)
      return Error(DSRT_ERR_COMM, "rendezvous: no rank published the key '%s' of Gloo's bootstrap within the "
                   "timeout (a rank failed while connecting; see its own error)", missing->c_str());
    bool all_done = false;
    Status status = round(false, deadline, &all_done);
    if (!status.ok() && Clock::now() + std::chrono::milliseconds(50) >= deadline)  // ms rounding in the poll
      return Error(DSRT_ERR_COMM, "rendezvous: no rank published the key '%s' of Gloo's bootstrap within the "
                   "timeout (%s)", missing->c_str(), status.message().c_str());
    DSRT_RETURN_IF_ERROR(status);
    if (all_done)
      return Error(DSRT_ERR_COMM, "rendezvous: every other rank finished Gloo's bootstrap without publishing the key "
                   "'%s' this rank waits for (ranks of different dsrt versions?)", missing->c_str());
  }
}

Status RendezvousStore::finish() {
  if (!error_.ok()) return error_;
  for (bool all_done = false; !all_done;) DSRT_RETURN_IF_ERROR(round(true, deadline_, &all_done));
  return Status::Ok();
}

Status RendezvousStore::round(bool done, Clock::time_point deadline, bool *all_done) {
  std::string mine(kTag, kTagBytes);
  mine.push_back(done ? '1' : '0');
  put_u64(&mine, token_);
  put_u64(&mine, pending_.size());
  for (const auto &entry : pending_) {
    put_u64(&mine, entry.first.size());
    mine += entry.first;
    put_u64(&mine, entry.second.size());
    mine.append(entry.second.data(), entry.second.size());
  }
  RendezvousOptions options = options_;
  options.timeout_s =
      std::max(1e-3, std::chrono::duration<double>(std::min(deadline, deadline_) - Clock::now()).count());
  std::vector<std::string> all;
  DSRT_RETURN_IF_ERROR(tcp_rendezvous_all_gather(options, rank_, world_, mine, &all)
                           .with_context("exchanging the addresses of the tcp communicator (Gloo)"));
  pending_.clear();
  *all_done = true;
  for (int r = 0; r < world_; ++r) {
    const std::string &theirs = all[r];
    size_t at = kTagBytes + 1;
    uint64_t token = 0, count = 0;
    if (theirs.compare(0, kTagBytes, kTag) != 0 || theirs.size() < at || !get_u64(theirs, &at, &token) ||
        !get_u64(theirs, &at, &count))
      return Error(DSRT_ERR_COMM, "rank %d joined the rendezvous with something other than a tcp communicator's "
                   "address (it chose NCCL, probably because it sees a GPU and this rank does not): give every rank a "
                   "GPU or none, or set DSRT_COMM=tcp on every rank", r);
    if (theirs[kTagBytes] != '1') *all_done = false;
    if (r == 0) token_ = token;
    for (uint64_t i = 0; i < count; ++i) {
      std::string key, value;
      if (!get_bytes(theirs, &at, &key) || !get_bytes(theirs, &at, &value))
        return Error(DSRT_ERR_COMM, "rendezvous: rank %d sent a truncated key table in round %d", r, rounds_ + 1);
      if (r != rank_) table_[key] = std::vector<char>(value.begin(), value.end());
    }
  }
  ++rounds_;
  return Status::Ok();
}

}  // namespace dsrt

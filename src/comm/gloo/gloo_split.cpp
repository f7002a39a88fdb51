// defines: gloo_split_mesh (ParentCommStore: Gloo's store as one all-gather round over the parent
// communicator; the full mesh of gloo_mesh.h over it).
#include "comm/gloo/gloo_split.h"

#ifdef DSRT_HAVE_GLOO
#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "comm/gloo/gloo_mesh.h"

namespace dsrt {
namespace {

void put_u64(std::vector<char> *out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (56 - 8 * i)));
}
bool get_u64(const char *p, size_t size, size_t *at, uint64_t *v) {
  if (size - *at < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v = (*v << 8) | static_cast<uint8_t>(p[*at + i]);
  *at += 8;
  return true;
}

// Keys set before the round travel in it; a get or wait of a key not seen runs the round (once).
class ParentCommStore final : public gloo::rendezvous::Store {
 public:
  explicit ParentCommStore(Comm &parent) : parent_(parent) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    table_[key] = data;
    pending_[key] = data;
  }
  std::vector<char> get(const std::string &key) override {
    ensure({key});
    return table_.at(key);
  }
  void wait(const std::vector<std::string> &keys) override { ensure(keys); }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override { ensure(keys); }

  // Collective over the parent: every rank's pending keys to every rank.
  Status round() {
    rounded_ = true;
    std::vector<char> mine(8);
    for (const auto &[key, value] : pending_) {
      put_u64(&mine, key.size());
      mine.insert(mine.end(), key.begin(), key.end());
      put_u64(&mine, value.size());
      mine.insert(mine.end(), value.begin(), value.end());
    }
    pending_.clear();
    uint64_t length = mine.size() - 8, longest = length;
    for (int i = 0; i < 8; ++i) mine[i] = static_cast<char>(length >> (56 - 8 * i));
    DSRT_RETURN_IF_ERROR(parent_.all_reduce_u64(&longest, 1, ReduceOp::Max));
    const size_t block = static_cast<size_t>(longest) + 8;
    mine.resize(block);
    std::vector<char> all(block * static_cast<size_t>(parent_.size()));
    CommHandle handle;
    DSRT_RETURN_IF_ERROR(parent_.all_gather_bytes(mine.data(), all.data(), block, &handle));
    DSRT_RETURN_IF_ERROR(handle->wait());
    for (int r = 0; r < parent_.size(); ++r) {
      const char *p = all.data() + static_cast<size_t>(r) * block;
      size_t at = 0;
      uint64_t used = 0;
      if (!get_u64(p, block, &at, &used) || used > block - 8)
        return Error(DSRT_ERR_COMM, "split: rank %d sent a malformed key table", r);
      const size_t end = 8 + static_cast<size_t>(used);
      while (at < end) {
        uint64_t n = 0;
        if (!get_u64(p, end, &at, &n) || end - at < n) return Error(DSRT_ERR_COMM, "split: rank %d: bad key", r);
        std::string key(p + at, n);
        at += n;
        if (!get_u64(p, end, &at, &n) || end - at < n) return Error(DSRT_ERR_COMM, "split: rank %d: bad value", r);
        table_[key] = std::vector<char>(p + at, p + at + n);
        at += n;
      }
    }
    return Status::Ok();
  }

  bool rounded() const { return rounded_; }
  const Status &error() const { return error_; }

 private:
  void ensure(const std::vector<std::string> &keys) {
    auto missing = [&] {
      return std::any_of(keys.begin(), keys.end(), [&](const std::string &k) { return table_.count(k) == 0; });
    };
    if (missing() && !rounded_) {
      Status status = round();
      if (!status.ok()) {
        error_ = status;
        throw gloo::IoException(status.message());
      }
    }
    if (missing()) {
      error_ = Error(DSRT_ERR_COMM, "split: a peer of this color published no pair addresses");
      throw gloo::IoException(error_.message());
    }
  }

  Comm &parent_;
  std::map<std::string, std::vector<char>> table_, pending_;
  bool rounded_ = false;
  Status error_;
};

}  // namespace

Status gloo_split_mesh(Comm &parent, const std::string &host, const SplitPlan &plan, const std::string &prefix,
                       double timeout_s, std::shared_ptr<gloo::Context> *out) {
  *out = nullptr;
  ParentCommStore store(parent);
  if (plan.size() == 1) return store.round();
  try {
    *out = gloo_connect_full_mesh(store, host, plan.rank, plan.size(), timeout_s, prefix);
    return Status::Ok();
  } catch (const std::exception &e) {
    *out = nullptr;
    if (!store.error().ok()) return store.error();
    Status status = Error(DSRT_ERR_COMM, "split: Gloo could not connect the %d ranks of color %d (this host's "
                          "address %s): %s", plan.size(), plan.color, host.c_str(), e.what());
    if (!store.rounded()) (void)store.round();  // the other ranks wait for this rank's part of the round
    return status;
  }
}

}  // namespace dsrt
#endif

// defines: SubGroupPipeline::run -- read i+1 / step i / write i-1 over a bounded buffer pool.
#include "offload/subgroup_pipeline.h"

#include <chrono>
#include <deque>
#include <optional>

namespace dsrt {
namespace {

constexpr uint64_t kAlign = 4096;

uint64_t round_up(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A sub-group that holds a buffer: being read, stepped, or written back.
struct Slot {
  size_t index = 0;
  PinnedLease lease;
  std::vector<SwapTicket> tickets;
  bool complete = true;  // false: not every array's write-back could be started; commit none
  SubGroupView view;
};

}  // namespace

uint64_t SubGroupPipeline::buffer_bytes(const SubGroup &group) {
  uint64_t total = 0;
  for (const SubGroupArray &array : group.arrays) total += round_up(array.bytes);
  return total;
}

Status SubGroupPipeline::run(const std::vector<SubGroup> &groups, const SubGroupStepFn &step,
                             SubGroupPipelineStats *stats_out) {
  SubGroupPipelineStats stats;
  stats.sub_groups = groups.size();
  auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < groups.size(); ++i) {
    uint64_t need = buffer_bytes(groups[i]);
    if (need > pool_.buffer_size())
      return Error(DSRT_ERR_CONFIG,
                   "sub-group %zu needs %llu bytes of swap buffer but buffers are %zu bytes: lower "
                   "zero_optimization.sub_group_size or raise the offload buffer_size",
                   i, static_cast<unsigned long long>(need), pool_.buffer_size());
  }
  if (!step) return Error(DSRT_ERR_INVALID_ARGUMENT, "sub-group pipeline: no step function");
  pool_.reset_peak();

  std::deque<Slot> writing;
  std::optional<Slot> prefetched;
  Status failure;

  auto finish_oldest_write = [&]() -> Status {
    Slot slot = std::move(writing.front());
    writing.pop_front();
    auto t0 = std::chrono::steady_clock::now();
    // Commit only in order: after a failed sub-group, later ones keep their previous values too.
    bool commit = slot.complete && slot.index == stats.committed;
    Status first = store_.wait_group(slot.tickets, commit);
    stats.write_wait_seconds += seconds_since(t0);
    if (!first.ok()) return first.with_context(Format("writing back sub-group %zu", slot.index));
    if (commit) ++stats.committed;
    return Status::Ok();
  };
  // A free buffer; finishes the oldest write-back when none is free.
  auto get_buffer = [&](PinnedLease *lease) -> Status {
    for (;;) {
      Status status = pool_.acquire(lease);
      if (status.ok() || writing.empty()) return status;
      DSRT_RETURN_IF_ERROR(finish_oldest_write());
    }
  };
  auto start_read = [&](size_t index, Slot *slot) -> Status {
    slot->index = index;
    slot->view = SubGroupView();
    slot->view.index = index;
    char *base = slot->lease.as<char>();
    uint64_t at = 0;
    for (const SubGroupArray &array : groups[index].arrays) {
      SwapTicket ticket;
      Status status = store_.swap_in(array.name, base + at, array.bytes, &ticket);
      if (!status.ok()) return status.with_context(Format("reading sub-group %zu", index));
      slot->tickets.push_back(ticket);
      slot->view.data.push_back(base + at);
      slot->view.bytes.push_back(array.bytes);
      stats.bytes_read += array.bytes;
      at += round_up(array.bytes);
    }
    return Status::Ok();
  };
  auto wait_tickets = [&](Slot &slot) -> Status {
    Status first;
    for (SwapTicket ticket : slot.tickets) {
      Status status = store_.wait(ticket);
      if (first.ok() && !status.ok()) first = status;
    }
    slot.tickets.clear();
    return first;
  };

  for (size_t i = 0; i < groups.size() && failure.ok(); ++i) {
    Slot current;
    if (prefetched && prefetched->index == i) {
      current = std::move(*prefetched);
      prefetched.reset();
    } else {
      failure = get_buffer(&current.lease);
      if (failure.ok()) failure = start_read(i, &current);
    }
    auto t0 = std::chrono::steady_clock::now();
    Status read_status = wait_tickets(current);  // always: the buffer must be quiet before it is released
    stats.read_wait_seconds += seconds_since(t0);
    if (failure.ok() && !read_status.ok()) failure = read_status.with_context(Format("reading sub-group %zu", i));
    if (!failure.ok()) break;

    if (options_.pipeline_read && i + 1 < groups.size()) {
      Slot next;
      Status status = get_buffer(&next.lease);
      if (status.ok()) {
        status = start_read(i + 1, &next);
        prefetched = std::move(next);  // even on failure: its tickets must be waited for
        if (!status.ok()) failure = status;
      } else if (status.code() != DSRT_ERR_STATE) {
        failure = status;  // a write-back failed; DSRT_ERR_STATE only means no buffer to spare
      }
      if (!failure.ok()) break;
    }

    auto t1 = std::chrono::steady_clock::now();
    Status step_status = step(current.view);
    stats.step_seconds += seconds_since(t1);
    if (!step_status.ok()) {
      failure = step_status.with_context(Format("stepping sub-group %zu", i));
      break;
    }

    for (size_t a = 0; a < groups[i].arrays.size(); ++a) {
      if (!groups[i].arrays[a].write_back) continue;
      SwapTicket ticket;
      Status status = store_.swap_out(groups[i].arrays[a].name, current.view.data[a], current.view.bytes[a], &ticket);
      if (!status.ok()) {
        failure = status.with_context(Format("writing back sub-group %zu", i));
        current.complete = false;
        break;
      }
      current.tickets.push_back(ticket);
      stats.bytes_written += current.view.bytes[a];
    }
    writing.push_back(std::move(current));
    if (!failure.ok()) break;
    if (!options_.pipeline_write) {
      while (!writing.empty()) {
        Status status = finish_oldest_write();
        if (failure.ok() && !status.ok()) failure = status;
      }
    }
  }

  // Quiesce: nothing may be in flight into or out of a buffer once it goes back to the pool. After a
  // failure, later sub-groups' write-backs are discarded so that exactly the first `committed`
  // sub-groups hold the new step.
  if (prefetched) (void)wait_tickets(*prefetched);
  prefetched.reset();
  while (!writing.empty()) {
    Status status = finish_oldest_write();
    if (failure.ok() && !status.ok()) failure = status;
  }
  stats.peak_buffers = pool_.peak_in_use();
  stats.total_seconds = seconds_since(started);
  if (stats_out != nullptr) *stats_out = stats;
  if (!failure.ok())
    return failure.with_context(Format("NVMe optimizer step (%zu of %zu sub-groups committed)", stats.committed,
                                       stats.sub_groups));
  return Status::Ok();
}

}  // namespace dsrt

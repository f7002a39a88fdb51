// SwapStore: the private folder and its cleanup (own, stale from a dead process, never anyone
// else's), round trips, and the rule that a failed swap-out keeps the data and the previous copy.
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <fstream>

#include "aio/aio_testing.h"
#include "offload/swap_store.h"
#include "test_aio_util.h"

namespace dsrt {
namespace {

using testing_aio::list_dir;
using testing_aio::random_buffer;
using testing_aio::ScratchDir;

bool exists(const std::string &path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0;
}

void touch(const std::string &path, const std::string &text = "keep me") {
  std::ofstream(path) << text;
}

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class SwapStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AioConfig config;
    config.block_size = 64 * 1024;
    config.queue_depth = 8;
    ASSERT_TRUE(AioEngine::create(config, AioOptions(), &engine_).ok());
    ASSERT_FALSE(nvme_.path().empty());
  }
  std::unique_ptr<SwapStore> make_store(int rank = 0) {
    SwapStoreOptions options;
    options.nvme_path = nvme_.path();
    options.rank = rank;
    std::unique_ptr<SwapStore> store;
    Status status = SwapStore::create(engine_.get(), options, &store);
    EXPECT_TRUE(status.ok()) << status.message();
    return store;
  }
  ScratchDir nvme_{"swap"};
  std::unique_ptr<AioEngine> engine_;
};

TEST_F(SwapStoreTest, PrivateFolderRoundTripsAndCleanup) {
  // Other people's things in nvme_path, including look-alikes.
  touch(nvme_.file("keep.txt"));
  ASSERT_EQ(mkdir(nvme_.file("dsrt-swap-notmine").c_str(), 0700), 0);
  touch(nvme_.file("dsrt-swap-notmine/data.swp"));
  ASSERT_EQ(mkdir(nvme_.file("dsrt-swap-0123456789abcdef-rank0").c_str(), 0700), 0);  // no owner.lock
  touch(nvme_.file("dsrt-swap-0123456789abcdef-rank0/x.swp"));

  auto store = make_store(3);
  ASSERT_NE(store, nullptr);
  std::string folder = store->folder();
  EXPECT_EQ(folder.rfind(nvme_.path() + "/dsrt-swap-", 0), 0u) << folder;
  EXPECT_NE(folder.find("-rank3"), std::string::npos) << folder;
  EXPECT_TRUE(exists(folder + "/owner.lock"));

  const uint64_t sizes[] = {4, 4096 * 3, 100003 * 4, 1 << 20};
  std::vector<AlignedBuffer> data;
  std::vector<SwapTicket> tickets;
  for (size_t i = 0; i < 4; ++i) {
    data.push_back(random_buffer(sizes[i], 20 + i));
    SwapTicket ticket;
    ASSERT_TRUE(store->swap_out("layer." + std::to_string(i) + "/exp_avg", data[i].data(), sizes[i], &ticket).ok());
    tickets.push_back(ticket);
  }
  for (auto &ticket : tickets) ASSERT_TRUE(store->wait(ticket).ok());
  EXPECT_EQ(store->size(), 4u);
  EXPECT_EQ(store->bytes_on_disk(), sizes[0] + sizes[1] + sizes[2] + sizes[3]);
  for (size_t i = 0; i < 4; ++i) {
    AlignedBuffer back;
    back.allocate(sizes[i]);
    std::string name = "layer." + std::to_string(i) + "/exp_avg";
    EXPECT_EQ(store->stored_bytes(name), sizes[i]);
    ASSERT_TRUE(store->read(name, back.data(), sizes[i]).ok());
    EXPECT_EQ(std::memcmp(back.data(), data[i].data(), sizes[i]), 0) << name;
  }
  // A part, from an aligned and from an odd offset.
  AlignedBuffer part;
  part.allocate(8192);
  ASSERT_TRUE(store->read("layer.3/exp_avg", part.data(), 8192, 4096 * 10).ok());
  EXPECT_EQ(std::memcmp(part.data(), data[3].as<char>() + 4096 * 10, 8192), 0);
  ASSERT_TRUE(store->read("layer.3/exp_avg", part.data(), 1000, 12345).ok());
  EXPECT_EQ(std::memcmp(part.data(), data[3].as<char>() + 12345, 1000), 0);

  // Overwrite, remove.
  AlignedBuffer newer = random_buffer(sizes[2], 99);
  ASSERT_TRUE(store->write("layer.2/exp_avg", newer.data(), sizes[2]).ok());
  AlignedBuffer back;
  back.allocate(sizes[2]);
  ASSERT_TRUE(store->read("layer.2/exp_avg", back.data(), sizes[2]).ok());
  EXPECT_EQ(std::memcmp(back.data(), newer.data(), sizes[2]), 0);
  ASSERT_TRUE(store->remove("layer.0/exp_avg").ok());
  EXPECT_FALSE(store->contains("layer.0/exp_avg"));
  EXPECT_EQ(list_dir(folder).size(), 5u) << "three arrays (one of them rewritten: two slots) and owner.lock";

  // Bad requests.
  EXPECT_EQ(store->read("no.such", back.data(), 4).code(), DSRT_ERR_STATE);
  EXPECT_EQ(store->read("layer.1/exp_avg", back.data(), sizes[1] + 1).code(), DSRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(store->remove("no.such").code(), DSRT_ERR_INVALID_ARGUMENT);

  store.reset();
  EXPECT_FALSE(exists(folder)) << "the store removes its folder";
  EXPECT_EQ(slurp(nvme_.file("keep.txt")), "keep me");
  EXPECT_TRUE(exists(nvme_.file("dsrt-swap-notmine/data.swp")));
  EXPECT_TRUE(exists(nvme_.file("dsrt-swap-0123456789abcdef-rank0/x.swp")));
}

TEST_F(SwapStoreTest, LiveStoresAreNeverCleanedByOthers) {
  auto first = make_store(0);
  AlignedBuffer data = random_buffer(50000, 1);
  ASSERT_TRUE(first->write("w", data.data(), 50000).ok());
  auto second = make_store(0);  // same rank, same folder: a second engine in this process
  auto third = make_store(1);
  EXPECT_NE(first->folder(), second->folder());
  EXPECT_NE(first->folder(), third->folder());
  EXPECT_EQ(SwapStore::remove_stale_folders(nvme_.path()), 0);
  AlignedBuffer back;
  back.allocate(50000);
  ASSERT_TRUE(first->read("w", back.data(), 50000).ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data(), 50000), 0);
}

TEST_F(SwapStoreTest, StaleFolderOfDeadProcessIsRemoved) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Crash without any destructor running: the folder and its files stay behind.
    close(pipe_fds[0]);
    std::unique_ptr<AioEngine> engine;
    if (!AioEngine::create(AioConfig(), AioOptions(), &engine).ok()) _exit(2);
    SwapStoreOptions options;
    options.nvme_path = nvme_.path();
    std::unique_ptr<SwapStore> store;
    if (!SwapStore::create(engine.get(), options, &store).ok()) _exit(3);
    AlignedBuffer data = random_buffer(200000, 2);
    if (!store->write("weights", data.data(), 200000).ok()) _exit(4);
    std::string folder = store->folder();
    if (write(pipe_fds[1], folder.data(), folder.size()) != static_cast<ssize_t>(folder.size())) _exit(5);
    _exit(0);
  }
  close(pipe_fds[1]);
  char text[4096] = {0};
  ssize_t got = read(pipe_fds[0], text, sizeof text - 1);
  close(pipe_fds[0]);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child step " << WEXITSTATUS(wstatus);
  ASSERT_GT(got, 0);
  std::string stale(text, static_cast<size_t>(got));
  ASSERT_TRUE(exists(stale + "/owner.lock"));
  ASSERT_EQ(list_dir(stale).size(), 2u) << "owner.lock and one slot file";

  // A second dead folder that holds a file someone else put there is left alone.
  std::string foreign = nvme_.file("dsrt-swap-00000000000000aa-rank7");
  ASSERT_EQ(mkdir(foreign.c_str(), 0700), 0);
  touch(foreign + "/owner.lock", "pid 1");
  touch(foreign + "/notes.txt");
  touch(nvme_.file("unrelated.bin"));

  auto store = make_store(0);  // creation cleans up
  EXPECT_FALSE(exists(stale)) << "the dead process's folder is removed";
  EXPECT_TRUE(exists(foreign + "/notes.txt"));
  EXPECT_TRUE(exists(foreign + "/owner.lock"));
  EXPECT_TRUE(exists(nvme_.file("unrelated.bin")));
  EXPECT_TRUE(exists(store->folder()));
}

// A crash between making the hidden ".creating" folder and creating its lock leaves a folder with
// no lock: removed once it is old, left alone while it may still be another process's creation.
TEST_F(SwapStoreTest, AbandonedCreationIsRemovedOnlyWhenOld) {
  const std::string old_one = nvme_.file(".dsrt-swap-00000000000000bb-rank0.creating");
  const std::string fresh = nvme_.file(".dsrt-swap-00000000000000cc-rank1.creating");
  const std::string foreign = nvme_.file(".dsrt-swap-00000000000000dd-rank2.creating");
  for (const std::string &folder : {old_one, fresh, foreign}) ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  touch(foreign + "/mine.txt");
  const struct timeval hour_ago[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimes(old_one.c_str(), hour_ago), 0);
  ASSERT_EQ(utimes(foreign.c_str(), hour_ago), 0);

  EXPECT_EQ(SwapStore::remove_stale_folders(nvme_.path()), 1);
  EXPECT_FALSE(exists(old_one));
  EXPECT_TRUE(exists(fresh)) << "a lockless folder made just now may be another process's creation";
  EXPECT_TRUE(exists(foreign + "/mine.txt")) << "a file dsrt did not make is never removed";
}

// Another rank's store creation in the same nvme_path: its lock file exists a moment before it is
// flock()ed. A cleanup in that moment must not take the unlocked lock as a dead owner's (it did: the
// creator's flock then failed with EAGAIN, or its rename found the folder gone).
TEST_F(SwapStoreTest, FolderBeingCreatedWithUnlockedLockIsLeftAlone) {
  const std::string creating = nvme_.file(".dsrt-swap-00000000000000ee-rank1.creating");
  ASSERT_EQ(mkdir(creating.c_str(), 0700), 0);
  touch(creating + "/owner.lock");
  EXPECT_EQ(SwapStore::remove_stale_folders(nvme_.path()), 0);
  EXPECT_TRUE(exists(creating + "/owner.lock")) << "a folder made just now may be another process's creation";
  const struct timeval hour_ago[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimes(creating.c_str(), hour_ago), 0);
  EXPECT_EQ(SwapStore::remove_stale_folders(nvme_.path()), 1) << "an old one was abandoned";
  EXPECT_FALSE(exists(creating));
}

TEST_F(SwapStoreTest, FailedSwapOutKeepsDataAndPreviousCopy) {
  auto store = make_store();
  const uint64_t size = 300000 * 4;
  AlignedBuffer first = random_buffer(size, 5);
  ASSERT_TRUE(store->write("master", first.data(), size).ok());

  for (int error : {EIO, ENOSPC}) {
    AlignedBuffer second = random_buffer(size, 6);
    AlignedBuffer expected;
    expected.allocate(size);
    std::memcpy(expected.data(), second.data(), size);
    aio_testing_fail_request(*engine_, 1, error);
    SwapTicket ticket;
    ASSERT_TRUE(store->swap_out("master", second.data(), size, &ticket).ok());
    Status status = store->wait(ticket);
    ASSERT_EQ(status.code(), DSRT_ERR_IO);
    EXPECT_NE(status.message().find("swap-out of 'master'"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(store->folder()), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("offset 0"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(std::strerror(error)), std::string::npos) << status.message();
    EXPECT_EQ(std::memcmp(second.data(), expected.data(), size), 0) << "the caller's data is untouched";
    AlignedBuffer back;
    back.allocate(size);
    ASSERT_TRUE(store->read("master", back.data(), size).ok());
    EXPECT_EQ(std::memcmp(back.data(), first.data(), size), 0) << "the previous copy survives";
    EXPECT_EQ(store->stored_bytes("master"), size);
  }
  // A name whose very first swap-out fails is not known afterwards.
  aio_testing_fail_request(*engine_, 1, EIO);
  EXPECT_EQ(store->write("fresh", first.data(), size).code(), DSRT_ERR_IO);
  EXPECT_FALSE(store->contains("fresh"));
  // And everything works again.
  ASSERT_TRUE(store->write("fresh", first.data(), size).ok());
  EXPECT_EQ(store->stored_bytes("fresh"), size);
}

TEST_F(SwapStoreTest, OperationsOnOneNameAreOrdered) {
  auto store = make_store();
  const uint64_t size = 3 * 65536 + 100;
  AlignedBuffer v1 = random_buffer(size, 30), v2 = random_buffer(size, 31), v3 = random_buffer(size, 32);
  SwapTicket t1, t2, t3, t4;
  ASSERT_TRUE(store->swap_out("x", v1.data(), size, &t1).ok());
  ASSERT_TRUE(store->swap_out("x", v2.data(), size, &t2).ok());  // finishes the first one first
  AlignedBuffer back;
  back.allocate(size);
  ASSERT_TRUE(store->swap_in("x", back.data(), size, &t3).ok());  // sees v2: finishes the write first
  ASSERT_TRUE(store->swap_out("x", v3.data(), size, &t4).ok());   // waits for the read of v2's slot
  EXPECT_EQ(store->wait(t1).code(), DSRT_ERR_STATE) << "already finished by the later swap_out";
  EXPECT_EQ(store->wait(t3).code(), DSRT_ERR_STATE) << "already finished by the later swap_out";
  EXPECT_EQ(std::memcmp(back.data(), v2.data(), size), 0);
  ASSERT_TRUE(store->wait_all().ok());
  ASSERT_TRUE(store->read("x", back.data(), size).ok());
  EXPECT_EQ(std::memcmp(back.data(), v3.data(), size), 0);
}

TEST_F(SwapStoreTest, FileRemovedBehindTheStoreIsAnIoError) {
  auto store = make_store();
  AlignedBuffer data = random_buffer(10000, 7);
  ASSERT_TRUE(store->write("x", data.data(), 10000).ok());
  for (const std::string &name : list_dir(store->folder()))
    if (name != "owner.lock") {
      ASSERT_EQ(unlink((store->folder() + "/" + name).c_str()), 0);
    }
  AlignedBuffer back;
  back.allocate(10000);
  Status status = store->read("x", back.data(), 10000);
  ASSERT_EQ(status.code(), DSRT_ERR_IO);
  EXPECT_NE(status.message().find("swap-in of 'x'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(store->folder()), std::string::npos) << status.message();
}

TEST_F(SwapStoreTest, MissingNvmePathIsClear) {
  SwapStoreOptions options;
  options.nvme_path = nvme_.file("does-not-exist");
  std::unique_ptr<SwapStore> store;
  Status status = SwapStore::create(engine_.get(), options, &store);
  EXPECT_EQ(status.code(), DSRT_ERR_IO);
  EXPECT_NE(status.message().find("does-not-exist"), std::string::npos);
  EXPECT_NE(status.message().find("nvme_path"), std::string::npos);
  EXPECT_EQ(store, nullptr);
}

// A swap folder on a file system that fills up: the swap-out that does not fit fails, the one
// before it stays readable, and replacing it with something too big keeps the old copy.
void full_disk_checks(AioEngine &engine, const std::string &nvme_path) {
  SwapStoreOptions options;
  options.nvme_path = nvme_path;
  std::unique_ptr<SwapStore> store;
  ASSERT_TRUE(SwapStore::create(&engine, options, &store).ok());
  const uint64_t small = 256 * 1024, big = 2 << 20;
  AlignedBuffer a = random_buffer(small, 8), b = random_buffer(big, 9);
  ASSERT_TRUE(store->write("a", a.data(), small).ok());
  Status status = store->write("b", b.data(), big);
  ASSERT_EQ(status.code(), DSRT_ERR_IO);
  EXPECT_NE(status.message().find("'b'"), std::string::npos) << status.message();
  EXPECT_FALSE(store->contains("b"));
  status = store->write("a", b.data(), big);
  ASSERT_EQ(status.code(), DSRT_ERR_IO);
  AlignedBuffer back;
  back.allocate(small);
  ASSERT_TRUE(store->read("a", back.data(), small).ok());
  EXPECT_EQ(std::memcmp(back.data(), a.data(), small), 0);
  std::string folder = store->folder();
  store.reset();
  EXPECT_FALSE(exists(folder));
}

TEST_F(SwapStoreTest, FullFileSystem) {
  std::string mount_point = nvme_.file("tiny");
  ASSERT_EQ(mkdir(mount_point.c_str(), 0700), 0);
  if (mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=1m") == 0) {
    testing_aio::MountGuard guard{mount_point};
    full_disk_checks(*engine_, mount_point);
    EXPECT_EQ(umount(mount_point.c_str()), 0) << std::strerror(errno) << " (a file was left open)";
    guard.path.clear();
    return;
  }
  std::fprintf(stderr,
               "[   NOTE   ] cannot mount a 1 MiB tmpfs here (%s); exercising the full-disk path with "
               "RLIMIT_FSIZE instead\n",
               std::strerror(errno));
  struct rlimit saved, limited;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  limited = saved;
  limited.rlim_cur = 1 << 20;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  full_disk_checks(*engine_, mount_point);
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
}

}  // namespace
}  // namespace dsrt

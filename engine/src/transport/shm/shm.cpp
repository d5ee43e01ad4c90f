#include "transport/shm/shm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "fabmeter/error.hpp"
#include "fabmeter/futex.hpp"
#include "fabmeter/pages.hpp"
#include "fabmeter/remote_parse.hpp"

namespace fm {
namespace {

uint32_t round_pow2(uint32_t x) {
  uint32_t p = 2;
  while (p < x) p <<= 1;
  return p;
}

constexpr size_t kPage = 4096;
constexpr size_t kMaxRingBytes = 256ull << 20;

}  // namespace

ShmTransport::ShmTransport(const QueueOptions& q, const Use& use)
    : role_(use.role), event_(use.poll == Poll::event), rq_depth_(round_pow2(q.rq_depth)) {}

ShmTransport::~ShmTransport() {
  if (!unlinked_) shm_unlink(name_.c_str());
  if (base_) munmap(base_, bytes_);
}

void ShmTransport::connect(Ctrl& ctrl, uint64_t max_msg) {
  size_t slot_size = shm::slot_size_for(max_msg);
  uint32_t count = rq_depth_;
  // Large messages: fewer slots rather than gigabytes of ring.
  while (count > 2 && slot_size * count > kMaxRingBytes) count /= 2;
  size_t ring_bytes = (slot_size * count + kPage - 1) / kPage * kPage;
  size_t ctl_bytes = (sizeof(shm::Control) + kPage - 1) / kPage * kPage;
  bytes_ = ctl_bytes + 2 * ring_bytes;

  int fd = -1;
  if (role_ == Role::server) {
    static std::atomic<unsigned> counter{0};
    name_ = "/fabmeter-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) sys_error("shm_open " + name_);
    unlinked_ = false;
    if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      ::close(fd);
      sys_error("cannot size shared memory segment to " + std::to_string(bytes_) + " bytes");
    }
  }
  std::string remote_name = ctrl.exchange(role_ == Role::server ? name_ : "", "shm segment name");
  if (role_ == Role::client) {
    // Only a segment of the server's making: "/fabmeter-PID-N", nothing else.
    if (remote_name.rfind("/fabmeter-", 0) != 0 || remote_name.size() > 64 ||
        remote_name.find_first_not_of("0123456789-", 10) != std::string::npos)
      runtime_error("shm: malformed segment name from the server: '" + remote_excerpt(remote_name) + "'");
    name_ = remote_name;
    fd = shm_open(name_.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) sys_error("shm_open " + name_ + " (is the server on this host?)");
  }
  base_ = map_faulted_in(bytes_, fd, &locked_);
  const int map_errno = errno;
  ::close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    errno = map_errno;
    sys_error("mmap shared memory segment");
  }
  ctl_ = static_cast<shm::Control*>(base_);
  if (role_ == Role::server) {
    ctl_->header = {shm::kMagic, shm::kVersion, count, slot_size, {ctl_bytes, ctl_bytes + ring_bytes}};
  }
  // The server's header must be visible before the client checks it.
  ctrl.barrier("shm segment ready");
  if (role_ == Role::client) {
    const auto& h = ctl_->header;
    if (h.magic != shm::kMagic || h.version != shm::kVersion || h.slot_size != slot_size || h.slot_count != count)
      runtime_error("shm segment " + name_ + " has an unexpected layout (version mismatch?)");
  }
  // Both ends have it mapped: unlink now so nothing is left behind whatever happens next.
  ctrl.barrier("shm segment mapped");
  if (role_ == Role::server) {
    shm_unlink(name_.c_str());
    unlinked_ = true;
  }

  auto* b = static_cast<std::byte*>(base_);
  const auto& h = ctl_->header;
  int me = role_ == Role::client ? 0 : 1;
  int tx_ring = me, rx_ring = 1 - me;  // ring 0 carries client -> server
  tx_ = shm::RingProducer(b + h.ring_offset[tx_ring], count, slot_size, &ctl_->head[tx_ring]);
  rx_ = shm::RingConsumer(b + h.ring_offset[rx_ring], count, slot_size, &ctl_->head[rx_ring]);
  my_bell_ = &ctl_->bell[me];
  remote_bell_ = &ctl_->bell[1 - me];
}

void ShmTransport::describe(JsonObj& o) const {
  if (!ctl_) return;
  o.add("ring_slots", ctl_->header.slot_count)
      .add("slot_size", ctl_->header.slot_size)
      .add("segment_bytes", static_cast<uint64_t>(bytes_))
      .add("segment_locked", locked_);
}

// Arm, re-check, then sleep: a remote end that publishes after our re-check sees
// the armed flag (both sides fence) and bumps the futex word we wait on.
template <class Ready>
bool ShmTransport::sleep_until(Ready ready) {
  if (ready()) return true;
  uint32_t key = my_bell_->seq.load(std::memory_order_acquire);
  my_bell_->armed.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!ready()) futex_wait(&my_bell_->seq, key, kWaitSliceMs);
  my_bell_->armed.store(0, std::memory_order_relaxed);
  return ready();
}

bool ShmTransport::wait_recv(RecvMsg& m) {
  return sleep_until([&] { return poll_recv(m); });
}

void ShmTransport::wait_send() {
  RecvMsg m;
  sleep_until([&] { return tx_.has_room() || poll_recv(m); });
}

}  // namespace fm

#include "session/admission.hpp"

#include <sys/mman.h>

#include <new>

#include "fabmeter/error.hpp"

namespace fm {

static_assert(std::atomic<Admission::Stage>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free,
              "shared between processes: the atomics must not be locks of one process");

Admission::Admission(size_t sessions, size_t handshakes) : sessions_(sessions), records_n_(sessions + handshakes) {
  const size_t bytes = records_n_ * sizeof(std::atomic<Stage>) + sessions_ * sizeof(std::atomic<pid_t>);
  map_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) sys_error("cannot map the server's session table");
  records_ = new (map_) std::atomic<Stage>[records_n_];
  slots_ = new (records_ + records_n_) std::atomic<pid_t>[sessions_];
  for (size_t i = 0; i < records_n_; ++i) records_[i].store(Stage::free);
  for (size_t i = 0; i < sessions_; ++i) slots_[i].store(0);
}

Admission::~Admission() {
  ::munmap(map_, records_n_ * sizeof(std::atomic<Stage>) + sessions_ * sizeof(std::atomic<pid_t>));
}

std::optional<size_t> Admission::open() {
  for (size_t i = 0; i < records_n_; ++i) {
    Stage expected = Stage::free;
    if (records_[i].compare_exchange_strong(expected, Stage::handshaking)) return i;
  }
  return std::nullopt;
}

bool Admission::drop(size_t rec) {
  Stage expected = Stage::handshaking;
  return records_[rec].compare_exchange_strong(expected, Stage::dropped);
}

bool Admission::release(size_t rec, pid_t pid) {
  bool held = false;
  for (size_t i = 0; i < sessions_; ++i) {
    pid_t expected = pid;
    held |= slots_[i].compare_exchange_strong(expected, 0);
  }
  close(rec);
  return held;
}

void Admission::auth_failed(size_t rec) {
  Stage expected = Stage::handshaking;
  records_[rec].compare_exchange_strong(expected, Stage::auth_failed);
}

Admission::Admit Admission::admit(size_t rec, pid_t pid) {
  Stage expected = Stage::handshaking;
  if (!records_[rec].compare_exchange_strong(expected, Stage::admitted)) return Admit::dropped;
  for (size_t i = 0; i < sessions_; ++i) {
    pid_t none = 0;
    if (slots_[i].compare_exchange_strong(none, pid)) return Admit::session;
  }
  return Admit::busy;
}

}  // namespace fm

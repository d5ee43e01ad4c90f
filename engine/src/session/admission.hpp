// Who holds the server's places: shared by the accepting process and its
// session children (one anonymous shared mapping, made before the first
// fork), so that only a client that has authenticated (or, on a server
// without a token, sent a valid hello) takes one of the --max-sessions
// slots, and connections still in their handshake have a budget of their
// own that a flood of them cannot stretch into the slots.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <optional>

namespace fm {

class Admission {
 public:
  // A connection's record goes free -> handshaking (its process started)
  // -> admitted (past its handshake: a session, or answered busy) or
  // auth_failed (its proof was wrong or missing); the parent may turn
  // handshaking into dropped, and then kills the process.
  enum class Stage : int { free, handshaking, admitted, dropped, auth_failed };
  enum class Admit { session, busy, dropped };

  Admission(size_t sessions, size_t handshakes);
  ~Admission();
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // The accepting process's side.
  std::optional<size_t> open();  // a free record for a new connection, now handshaking; none: all in use
  Stage stage(size_t rec) const { return records_[rec].load(); }
  bool drop(size_t rec);         // handshaking -> dropped; false: it got past its handshake first
  bool release(size_t rec, pid_t pid);  // the child `pid` ended: frees its record and slot; whether it had one
  void close(size_t rec) { records_[rec].store(Stage::free); }  // a record whose child never started

  // The session child's side (`pid`: its own).
  Admit admit(size_t rec, pid_t pid);   // handshaking -> admitted, then a free slot if any
  void auth_failed(size_t rec);         // handshaking -> auth_failed (the parent counts it: auth_failures.hpp)

 private:
  size_t sessions_, records_n_;
  void* map_;
  std::atomic<Stage>* records_;
  std::atomic<pid_t>* slots_;
};

}  // namespace fm

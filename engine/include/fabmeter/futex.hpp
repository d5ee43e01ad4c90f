// Futex sleep and wake on a 32-bit word, which may live in memory shared
// between processes (so not FUTEX_PRIVATE).
#pragma once
#include <atomic>
#include <cstdint>

namespace fm {

// Sleeps while *word == expected, at most timeout_ms (< 0: no limit); returns
// early on a wake-up, a changed word or a signal.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void futex_wake(std::atomic<uint32_t>* word);

}  // namespace fm

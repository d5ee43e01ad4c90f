// fabmeter-mpibench: the MPI layer's figures as the uDAPL study's MPI tests
// took them (osu bw and lt, presta allred), the loop an MPI user writes:
//   lat SIZE ITERS WARMUP        ranks 0 and 1 ping-pong (MPI_Send, MPI_Recv);
//                                every round trip timed, p50 and mean of RTT/2
//   bw SIZE ITERS WARMUP WINDOW  rank 0 sends WINDOW MPI_Isend a batch to rank
//                                1, which answers each batch with 4 bytes
//   allreduce SIZE ITERS WARMUP  every rank: MPI_Allreduce of SIZE bytes of
//                                doubles (MPI_SUM), each timed at rank 0
// Rank 0 prints one JSON line: {"tool", "test", "ranks", "size", "iterations",
// "warmup", and the test's figures, "library_version"}. Times from
// CLOCK_MONOTONIC; the p50 interpolates linearly, as fabmeter's do.
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

double p50(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = 0.5 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

int usage() {
  std::fprintf(stderr, "usage: fabmeter-mpibench lat|bw|allreduce SIZE ITERS WARMUP [WINDOW]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::string test = argc > 1 ? argv[1] : "";
  const long size = argc > 4 ? std::atol(argv[2]) : -1, iters = argc > 4 ? std::atol(argv[3]) : -1,
             warmup = argc > 4 ? std::atol(argv[4]) : -1, window = argc > 5 ? std::atol(argv[5]) : 64;
  const bool pair = test == "lat" || test == "bw";
  if ((!pair && test != "allreduce") || size < 1 || iters < 1 || warmup < 0 || window < 1 || (pair && ranks < 2)) {
    if (rank == 0) usage();
    MPI_Finalize();
    return 2;
  }
  std::vector<char> buf(static_cast<size_t>(size)), ack(4);
  std::vector<double> times;
  double gbps = 0, msg_rate = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (test == "lat" && rank < 2) {
    const int other = 1 - rank;  // the other rank of the ping-pong
    for (long i = 0; i < warmup + iters; ++i) {
      const double t0 = now_ns();
      if (rank == 0) {
        MPI_Send(buf.data(), static_cast<int>(size), MPI_CHAR, other, 0, MPI_COMM_WORLD);
        MPI_Recv(buf.data(), static_cast<int>(size), MPI_CHAR, other, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (i >= warmup) times.push_back((now_ns() - t0) / 2);
      } else {
        MPI_Recv(buf.data(), static_cast<int>(size), MPI_CHAR, other, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), static_cast<int>(size), MPI_CHAR, other, 0, MPI_COMM_WORLD);
      }
    }
  } else if (test == "bw" && rank < 2) {
    std::vector<MPI_Request> req(static_cast<size_t>(window));
    const long batches = (iters + window - 1) / window, warm_batches = (warmup + window - 1) / window;
    double t0 = now_ns();
    for (long b = 0; b < warm_batches + batches; ++b) {
      if (b == warm_batches) t0 = now_ns();
      for (long k = 0; k < window; ++k) {
        if (rank == 0)
          MPI_Isend(buf.data(), static_cast<int>(size), MPI_CHAR, 1, 1, MPI_COMM_WORLD, &req[static_cast<size_t>(k)]);
        else
          MPI_Irecv(buf.data(), static_cast<int>(size), MPI_CHAR, 0, 1, MPI_COMM_WORLD, &req[static_cast<size_t>(k)]);
      }
      MPI_Waitall(static_cast<int>(window), req.data(), MPI_STATUSES_IGNORE);
      if (rank == 0) MPI_Recv(ack.data(), 4, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      else MPI_Send(ack.data(), 4, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
    }
    const double s = (now_ns() - t0) / 1e9, msgs = static_cast<double>(batches * window);
    msg_rate = msgs / s;
    gbps = msg_rate * static_cast<double>(size) * 8 / 1e9;
  } else if (test == "allreduce") {
    const size_t n = std::max<size_t>(1, static_cast<size_t>(size) / sizeof(double));
    std::vector<double> in(n, rank), out(n);
    for (long i = 0; i < warmup + iters; ++i) {
      const double t0 = now_ns();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (i >= warmup) times.push_back(now_ns() - t0);
    }
    // Every rank's sum is 0 + 1 + ... + (ranks - 1): a wrong reduction is an error, not a figure.
    if (out[0] != 0.5 * ranks * (ranks - 1)) {
      std::fprintf(stderr, "fabmeter-mpibench: MPI_Allreduce summed %g, not %g\n", out[0], 0.5 * ranks * (ranks - 1));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    v = v.substr(0, v.find_first_of(",\n"));
    for (char& c : v) if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = ' ';
    std::printf("{\"tool\": \"fabmeter-mpibench\", \"test\": \"%s\", \"ranks\": %d, \"size\": %ld, \"iterations\": %ld, "
                "\"warmup\": %ld, ", test.c_str(), ranks, size, iters, warmup);
    if (test == "bw")
      std::printf("\"window\": %ld, \"gbps\": %.6g, \"msg_rate\": %.6g, ", window, gbps, msg_rate);
    else
      std::printf("\"%s_ns_p50\": %.6g, \"%s_ns_mean\": %.6g, ", test == "lat" ? "oneway" : "allreduce", p50(times),
                  test == "lat" ? "oneway" : "allreduce", mean(times));
    std::printf("\"library_version\": \"%s\"}\n", v.c_str());
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}

// The control channel's frame check, heartbeats and the handshake pieces.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/handshake.hpp"

namespace {

std::string header(uint32_t len, fm::CtrlType t) {
  return {char(len), char(len >> 8), char(len >> 16), char(len >> 24), static_cast<char>(t)};
}

std::string check(const std::string& h, fm::CtrlType expect, uint32_t max = fm::kMaxFrameDefault) {
  fm::FrameHeader out;
  return fm::check_frame_header(reinterpret_cast<const unsigned char*>(h.data()), expect, max, 0, &out);
}

TEST(FrameHeader, ChecksTypeAndLengthBeforeTheBody) {
  EXPECT_EQ(check(header(100, fm::CtrlType::hello), fm::CtrlType::hello), "");
  EXPECT_NE(check(header(0xffffffff, fm::CtrlType::hello), fm::CtrlType::hello).find("exceeds its limit"), std::string::npos);
  EXPECT_NE(check(header(0, static_cast<fm::CtrlType>(0)), fm::CtrlType::hello).find("unknown frame type"), std::string::npos);
  EXPECT_NE(check(header(0, static_cast<fm::CtrlType>(200)), fm::CtrlType::hello).find("unknown frame type"), std::string::npos);
  EXPECT_NE(check(header(4, fm::CtrlType::exchange), fm::CtrlType::hello).find("expected hello, got exchange"), std::string::npos);
  EXPECT_EQ(check(header(10, fm::CtrlType::refuse), fm::CtrlType::exchange), "");
  EXPECT_NE(check(header(1, fm::CtrlType::heartbeat), fm::CtrlType::exchange), "");
  EXPECT_EQ(check(header(1 << 20, fm::CtrlType::exchange), fm::CtrlType::exchange, 1 << 20), "");
  EXPECT_NE(check(header((1 << 20) + 1, fm::CtrlType::exchange), fm::CtrlType::exchange, 1 << 20), "");
  EXPECT_NE(check(header(33, fm::CtrlType::auth), fm::CtrlType::auth), "");
}

struct Pair {
  int sv[2];
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0); }
  ~Pair() { ::close(sv[1]); }
  void put(const std::string& s) { ASSERT_EQ(::write(sv[1], s.data(), s.size()), static_cast<ssize_t>(s.size())); }
};

TEST(Ctrl, HeartbeatsAreSwallowed) {
  Pair p;
  fm::Ctrl c(p.sv[0], 1000);
  p.put(header(0, fm::CtrlType::heartbeat) + header(0, fm::CtrlType::heartbeat));
  EXPECT_EQ(c.peek(), fm::Ctrl::Peek::nothing);
  EXPECT_EQ(c.frames_in(), 2u);
  p.put(header(0, fm::CtrlType::heartbeat) + header(3, fm::CtrlType::end_point) + "123");
  EXPECT_EQ(c.peek(), fm::Ctrl::Peek::message);
  EXPECT_EQ(c.recv(fm::CtrlType::end_point, "test"), "123");
}

TEST(Ctrl, OversizedFrameRefusedWithoutReadingIt) {
  Pair p;
  fm::Ctrl c(p.sv[0], 1000);
  p.put(header(0xfffffff0, fm::CtrlType::exchange) + "abc");
  EXPECT_THROW(c.recv(fm::CtrlType::exchange, "test"), fm::Error);
  c.set_max_frame(8);
  p.put(header(9, fm::CtrlType::exchange) + "123456789");
  EXPECT_THROW(c.recv(fm::CtrlType::exchange, "test"), fm::Error);
}

TEST(Ctrl, FailIsARuntimeErrorOnOneLine) {
  Pair p;
  fm::Ctrl c(p.sv[0], 1000);
  p.put(header(11, fm::CtrlType::fail) + "bad\nthing\x1b!");
  try {
    c.recv(fm::CtrlType::welcome, "test");
    FAIL();
  } catch (const fm::Error& e) {
    EXPECT_EQ(e.kind, fm::ErrorKind::runtime);
    EXPECT_STREQ(e.what(), "bad?thing?!");
  }
}

// A wait outside recv() ends when the other end's channel closes, or when it
// stays silent past the heartbeat bound; heartbeats keep it going.
TEST(RemoteWatch, EndsOnCloseAndOnSilence) {
  {
    Pair p;
    fm::Ctrl c(p.sv[0], 1000);
    fm::RemoteWatch watch(c);
    EXPECT_NO_THROW(watch.check("test"));
    ::close(p.sv[1]);
    p.sv[1] = ::open("/dev/null", O_WRONLY);  // the destructor's close has something to close
    EXPECT_THROW(watch.check("test"), fm::Error);
  }
  Pair p;
  fm::Ctrl c(p.sv[0], 1000);
  c.expect_heartbeats(100);
  fm::RemoteWatch watch(c);
  usleep(150'000);
  p.put(header(0, fm::CtrlType::heartbeat));
  EXPECT_NO_THROW(watch.check("test"));  // silent for 150 ms, but the beat counts from now
  usleep(150'000);
  EXPECT_THROW(watch.check("test"), fm::Error);
}

// The end-of-session race: the server's heartbeat lies unread at the client
// when it says bye. A plain close would reset the connection and the server's
// read after the bye would fail (reset by the other end); say_bye ends it with a FIN.
// The client's Heartbeat runs meanwhile, as in run_client.
// Over loopback TCP: only TCP turns a close with unread input into a reset.
TEST(Ctrl, ByeEndsWithoutAResetDespiteAnUnreadHeartbeat) {
  fm::Listener listener("127.0.0.1", 0);
  fm::Ctrl c = fm::Ctrl::connect("127.0.0.1:" + std::to_string(listener.port()), 0, 1000);
  const fm::Ctrl server_end = listener.accept(1000);
  const int server = server_end.fd();
  const std::string beat = header(0, fm::CtrlType::heartbeat);
  ASSERT_EQ(::write(server, beat.data(), beat.size()), 5);
  pollfd in{c.fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&in, 1, 1000), 1);  // the beat is there, unread
  std::thread bye;
  {
    fm::Heartbeat beating(c);
    bye = std::thread([&c] { c.say_bye(); });
    unsigned char hdr[fm::kFrameHeaderBytes];
    EXPECT_EQ(::recv(server, hdr, sizeof hdr, MSG_WAITALL), 5);  // no ASSERT: the thread must be joined
    EXPECT_EQ(hdr[4], static_cast<unsigned char>(fm::CtrlType::bye));
    char more;
    EXPECT_EQ(::recv(server, &more, 1, 0), 0) << "the client's close reset the connection: " << strerror(errno);
    ::shutdown(server, SHUT_WR);  // as the server's close_draining: the client's drain ends here
    bye.join();
  }
  EXPECT_EQ(c.fd(), -1);
}

// What each thread's descriptor table refers to: tid -> link targets.
std::map<std::string, std::vector<std::string>> tables() {
  std::map<std::string, std::vector<std::string>> out;
  DIR* tasks = opendir("/proc/self/task");
  while (dirent* t = tasks ? readdir(tasks) : nullptr) {
    if (t->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + t->d_name + "/fd";
    DIR* fds = opendir(dir.c_str());
    if (!fds) continue;  // a thread that has just ended
    auto& links = out[t->d_name];
    while (dirent* f = readdir(fds)) {
      char target[256];
      const ssize_t n = readlink((dir + "/" + f->d_name).c_str(), target, sizeof target);
      if (f->d_name[0] != '.' && n > 0) links.emplace_back(target, static_cast<size_t>(n));
    }
    closedir(fds);
  }
  if (tasks) closedir(tasks);
  return out;
}

// The beat thread's table holds the control socket alone, so that the
// session's thread has a table to itself; and its copy is gone once the
// session closes the channel, or the close would not be the socket's last
// (the other end would see no FIN, and a reset when unread input meets the end).
TEST(Heartbeat, ItsThreadHoldsTheControlSocketAloneAndDropsItBeforeTheClose) {
  Pair p;
  fm::Ctrl c(p.sv[0], 1000);
  struct stat st{};
  ASSERT_EQ(fstat(p.sv[0], &st), 0);
  const std::string socket = "socket:[" + std::to_string(st.st_ino) + "]";
  const std::string me = std::to_string(gettid());
  fm::Heartbeat beating(c);
  bool alone = false;
  for (int i = 0; i < 200 && !alone; ++i, usleep(10'000))
    for (const auto& [tid, links] : tables())
      alone |= tid != me && links == std::vector<std::string>{socket};
  EXPECT_TRUE(alone) << "no thread whose table is the control socket alone";
  EXPECT_GT(tables()[me].size(), 2u);  // ours is untouched: the pair's other end, stdio
  ::shutdown(p.sv[1], SHUT_WR);  // the drain ends at once
  c.close_draining(1000);
  for (const auto& [tid, links] : tables())
    EXPECT_EQ(std::count(links.begin(), links.end(), socket), 0) << "thread " << tid << " still holds it";
  char byte;
  EXPECT_EQ(::recv(p.sv[1], &byte, 1, 0), 0);  // the other end sees the close
}

// A message the waiting side has not read yet holds back the heartbeats
// queued behind it; the other end is not silent for that (a tcp data connection
// whose last ACK was lost: the client, connected, already sent its barrier).
TEST(RemoteWatch, AMessageWaitingIsNotSilence) {
  Pair p;
  fm::Ctrl c(p.sv[0], 1000);
  c.expect_heartbeats(100);
  fm::RemoteWatch watch(c);
  p.put(header(0, fm::CtrlType::barrier));
  p.put(header(0, fm::CtrlType::heartbeat));
  usleep(150'000);
  EXPECT_NO_THROW(watch.check("test"));
  usleep(150'000);
  EXPECT_NO_THROW(watch.check("test"));
}

TEST(Handshake, ProofsBindTokenNoncesAndParameters) {
  const std::string nc(fm::kNonceBytes, 'c'), ns(fm::kNonceBytes, 's');
  const std::string hello = fm::encode_hello("host-a", nc, "", "", {}, "", "experiment=lat\n");
  const std::string token = "0123456789abcdef0123";
  const std::string p = fm::client_proof(token, hello, ns);
  EXPECT_EQ(p.size(), fm::kMacBytes);
  EXPECT_TRUE(fm::proof_matches(p, fm::client_proof(token, hello, ns)));
  EXPECT_FALSE(fm::proof_matches(p, fm::client_proof(token + "x", hello, ns)));
  EXPECT_FALSE(fm::proof_matches(p, fm::client_proof(token, hello, std::string(fm::kNonceBytes, 't'))));
  EXPECT_FALSE(fm::proof_matches(p, fm::client_proof(token, fm::encode_hello("host-a", nc, "", "", {}, "", "experiment=bw\n"), ns)));
  // The tool request too: no one can change what the server starts.
  EXPECT_FALSE(fm::proof_matches(p, fm::client_proof(token, fm::encode_hello("host-a", nc, "", R"({"tool":"qperf"})", {}, "", "experiment=lat\n"), ns)));
  // The relay target is part of what the proof covers: no one can redirect a client's run.
  // So are the CPUs asked for: no one can move a session onto other CPUs.
  EXPECT_FALSE(fm::proof_matches(p, fm::client_proof(token, fm::encode_hello("host-a", nc, "", "", {{}, {1}}, "", "experiment=lat\n"), ns)));
  EXPECT_FALSE(fm::proof_matches(p, fm::client_proof(token, fm::encode_hello("host-a", nc, "10.0.0.9", "", {}, "", "experiment=lat\n"), ns)));
  EXPECT_FALSE(fm::proof_matches(p, fm::server_proof(token, hello, ns, "")));  // roles differ
  EXPECT_FALSE(fm::proof_matches(p, p.substr(1)));
  EXPECT_EQ(p.find(token), std::string::npos);
}

TEST(Handshake, DecodersRejectMalformedInput) {
  const std::string nc(fm::kNonceBytes, '\x01');
  fm::Hello h = fm::decode_hello(fm::encode_hello("host-a", nc, "", "", {}, "", "experiment=lat\n"));
  EXPECT_EQ(h.host, "host-a");
  EXPECT_EQ(h.nonce, nc);
  EXPECT_EQ(h.relay, "");
  EXPECT_EQ(h.params, "experiment=lat\n");
  EXPECT_EQ(fm::decode_hello(fm::encode_hello("host-a", nc, "[fd00::3]:7000", "", {}, "", "")).relay, "[fd00::3]:7000");
  EXPECT_EQ(fm::decode_hello(fm::encode_hello("host-a", nc, "", R"({"tool":"qperf"})", {}, "", "")).tool, R"({"tool":"qperf"})");
  h = fm::decode_hello(fm::encode_hello("host-a", nc, "h:1", "", {{0, 2}, {1}}, "", "experiment=lat\n"));
  EXPECT_EQ(h.cpus.client, (std::vector<int>{0, 2}));
  EXPECT_EQ(h.cpus.server, std::vector<int>{1});
  EXPECT_EQ(h.params, "experiment=lat\n");
  h = fm::decode_hello(fm::encode_hello("host-a", nc, "", "", {{}, {3}}, "", ""));
  EXPECT_TRUE(h.cpus.client.empty());
  EXPECT_EQ(h.cpus.server, std::vector<int>{3});
  EXPECT_TRUE(fm::decode_hello(fm::encode_hello("host-a", nc, "", "", {}, "", "")).cpus.server.empty());
  EXPECT_EQ(fm::decode_hello(fm::encode_hello("host-a", nc, "", "", {}, R"({"to":"h:1"})", "")).hop, R"({"to":"h:1"})");
  EXPECT_EQ(fm::decode_hello("1\nold format\n").version, 1u);
  EXPECT_EQ(fm::decode_hello("2\nhost\n" + std::string(64, '0') + "\nexperiment=lat\n").version, 2u);  // only the version read
  const std::string nonce_hex(64, '0');
  const std::string v = std::to_string(fm::kProtocolVersion);  // this version's hello: read whole
  for (const std::string& bad :
       {std::string(), v, std::string("x\n"), std::string("99999999999\n"), v + "\nhost\nabc\n", v + "\n\n00\n",
        v + "\nho st\n",
        v + "\nhost\n" + nonce_hex + "\n",                                  // no relay line
        v + "\nhost\n" + nonce_hex + "\nbad host\nexperiment=lat\n",        // relay not printable
        v + "\nhost\n" + nonce_hex + "\n" + std::string(fm::kMaxRelay + 1, 'a') + "\n",  // relay too long
        v + "\nhost\n" + nonce_hex + "\n\n",                                       // no tool line
        v + "\nhost\n" + nonce_hex + "\nh:1\n{\"tool\":\"qperf\"}\n",              // relay and tool
        v + "\nhost\n" + nonce_hex + "\n\n" + std::string(fm::kMaxToolLine + 1, ' ') + "\n",  // tool too long
        v + "\nhost\n" + nonce_hex + "\n\n\n",                                     // no cpus line
        v + "\nhost\n" + nonce_hex + "\n\n\n1\n",                                  // cpus without a comma
        v + "\nhost\n" + nonce_hex + "\n\n\n,1,2\n",                               // three sides
        v + "\nhost\n" + nonce_hex + "\n\n\n,-1\n",                                // not a CPU number
        v + "\nhost\n" + nonce_hex + "\n\n\n,1++2\n",                              // an empty CPU
        v + "\nhost\n" + nonce_hex + "\n\n\n,1024\n",                              // beyond CPU_SETSIZE
        v + "\nhost\n" + nonce_hex + "\n\n\n0,\n",                                 // a relayed run's, no relay
        v + "\nhost\n" + nonce_hex + "\n\n{\"tool\":\"qperf\"}\n,1\n",               // beside a tool
        v + "\nhost\n" + nonce_hex + "\n\n\n," + std::string(fm::kMaxCpusLine, '1') + "\n",  // too long
        v + "\nhost\n" + nonce_hex + "\n\n\n\n",                                   // no hop line
        v + "\nhost\n" + nonce_hex + "\nh:1\n\n\n{\"to\":\"h:2\"}\n",                // relay and hop
        v + "\nhost\n" + nonce_hex + "\n\n\n\n" + std::string(fm::kMaxHopLine + 1, ' ') + "\n"})  // hop too long
    EXPECT_THROW(fm::decode_hello(bad), fm::Error) << bad;
  EXPECT_THROW(fm::decode_challenge("short"), fm::Error);
  EXPECT_EQ(fm::decode_challenge(""), "");
  EXPECT_THROW(fm::decode_auth(std::string(31, 'x')), fm::Error);
  EXPECT_THROW(fm::decode_welcome("zz\nhost\n{}"), fm::Error);
  fm::Welcome w = fm::decode_welcome("\nhost-b\n{\"a\": 1}");
  EXPECT_EQ(w.host, "host-b");
  EXPECT_EQ(w.env, "{\"a\":1}");  // re-encoded on one line
  EXPECT_TRUE(w.mac.empty());
  EXPECT_EQ(fm::decode_env("{\"f\":{\"n\":{\"q\":[\"0\"]}}}"), "{\"f\":{\"n\":{\"q\":[\"0\"]}}}");  // three levels
  EXPECT_EQ(fm::decode_env("{\"k\": \"a\\nb\", \"o\": {\"x\": 1}, \"l\": [1, 2]}"),
            "{\"k\":\"a\\nb\",\"l\":[1,2],\"o\":{\"x\":1}}");
  for (const std::string& bad :
       {std::string("{\"a\":1}\n{\"type\":\"point\"}"), std::string("{\"a\":1}},\"b\":{"), std::string("[1]"),
        std::string("1"), std::string("{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":1}}}}}"), std::string("{\"a\":[[[[1]]]]}"), std::string("{\"A\":1}"), std::string("{\"\":1}"),
        "{\"a\":\"" + std::string(fm::kMaxEnvString + 1, 'x') + "\"}", std::string("{\"a\":\"\x01\"}"),
        std::string("{\"a\":1e999}"), std::string("{\"a\":\"\xff\"}"), std::string("")})
    EXPECT_THROW(fm::decode_env(bad), fm::Error) << bad;
  std::string many = "{";
  for (size_t i = 0; i <= fm::kMaxEnvItems / 2; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  EXPECT_THROW(fm::decode_env(many + "}"), fm::Error);
}

TEST(Handshake, TokenSources) {
  const std::string dir = ::testing::TempDir();
  const std::string f = dir + "/fm_token_test";
  std::ofstream(f) << "0123456789abcdef-from-file\n";
  chmod(f.c_str(), 0600);
  setenv("FABMETER_TOKEN", "0123456789abcdef-from-env", 1);
  EXPECT_EQ(fm::load_token(f), "0123456789abcdef-from-file");  // the file wins
  EXPECT_EQ(fm::load_token(""), "0123456789abcdef-from-env");
  setenv("FABMETER_TOKEN", "short", 1);
  EXPECT_THROW(fm::load_token(""), fm::Error);
  unsetenv("FABMETER_TOKEN");
  EXPECT_EQ(fm::load_token(""), "");
  chmod(f.c_str(), 0644);
  EXPECT_THROW(fm::load_token(f), fm::Error);
  ::unlink(f.c_str());
}

}  // namespace

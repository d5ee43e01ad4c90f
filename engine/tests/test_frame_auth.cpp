// Authenticated control frames (frame_auth.hpp): tags over direction,
// number, type, length and body; the session key both ends derive; a Ctrl
// pair after the welcome, and what a man in the middle's changes become.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/frame_auth.hpp"
#include "fabmeter/handshake.hpp"

namespace {

const std::string kKey(32, 'k');
constexpr uint8_t kExchange = static_cast<uint8_t>(fm::CtrlType::exchange);
constexpr uint8_t kBeat = static_cast<uint8_t>(fm::CtrlType::heartbeat);

TEST(FrameAuth, EachFrameOnceInOrderFromItsDirection) {
  fm::FrameAuth server(kKey, true), client(kKey, false);
  const std::string t0 = server.seal(kExchange, "stamps");
  const std::string t1 = server.seal(kBeat, "");
  const std::string t2 = server.seal(kExchange, "more");
  EXPECT_EQ(client.open(kExchange, "stamps", t0), "");
  EXPECT_NE(client.open(kExchange, "stamps", t0), "");  // replayed
  EXPECT_NE(client.open(kExchange, "more", t2), "");    // after a lost frame (t1)
  EXPECT_EQ(client.open(kBeat, "", t1), "");
  EXPECT_EQ(client.open(kExchange, "more", t2), "");
  EXPECT_EQ(client.verified(), 3u);
}

// Each tag is HMAC-SHA-256 of the documented layout under the key, the
// second and later too (a state restarted from its key, never unkeyed),
// computed here by OpenSSL's one-shot HMAC() apart from FrameAuth.
TEST(FrameAuth, EveryTagIsTheLayoutsHmacUnderTheKey) {
  const auto layout = [](char direction, uint64_t number, uint8_t type, const std::string& body) {
    std::string m(1, direction);
    for (int i = 0; i < 8; ++i) m += static_cast<char>(number >> (8 * i));
    m += static_cast<char>(type);
    for (int i = 0; i < 4; ++i) m += static_cast<char>(body.size() >> (8 * i));
    return m + body;
  };
  const auto hmac = [](const std::string& key, const std::string& m) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(m.data()),
         m.size(), out, &len);
    return std::string(reinterpret_cast<char*>(out), len);
  };
  fm::FrameAuth server(kKey, true), client(kKey, false);
  const std::string bodies[] = {"p50 86700", "", std::string(300, 'x')};
  for (uint64_t n = 0; n < 3; ++n) {
    const uint8_t type = n == 1 ? kBeat : kExchange;
    const std::string tag = server.seal(type, bodies[n]);
    EXPECT_EQ(tag, hmac(kKey, layout(2, n, type, bodies[n]))) << "server frame " << n;
    EXPECT_EQ(client.open(type, bodies[n], tag), "");
    EXPECT_EQ(client.seal(type, bodies[n]), hmac(kKey, layout(1, n, type, bodies[n]))) << "client frame " << n;
  }
}

TEST(FrameAuth, BodyTypeLengthKeyAndDirectionAreCovered) {
  fm::FrameAuth server(kKey, true);
  const std::string tag = server.seal(kExchange, "p50 86700");
  const auto fails = [&](uint8_t type, const std::string& body, const std::string& t, const std::string& key = kKey) {
    fm::FrameAuth client(key, false);
    return client.open(type, body, t);
  };
  EXPECT_EQ(fails(kExchange, "p50 86700", tag), "");
  EXPECT_NE(fails(kExchange, "p50 86701", tag), "");
  EXPECT_NE(fails(kExchange, "p50 8670", tag), "");  // cut short
  EXPECT_NE(fails(static_cast<uint8_t>(fm::CtrlType::fail), "p50 86700", tag), "");
  EXPECT_NE(fails(kExchange, "p50 86700", tag, std::string(32, 'K')), "");
  EXPECT_NE(fails(kExchange, "p50 86700", tag.substr(0, 31)), "");
  // A client's own frame sent back to it: the other direction.
  fm::FrameAuth client(kKey, false), other(kKey, false);
  EXPECT_NE(other.open(kExchange, "x", client.seal(kExchange, "x")), "");
  const std::string why = fails(kExchange, "changed", tag);
  EXPECT_NE(why.find("control frame 0 from the server failed authentication"), std::string::npos) << why;
}

TEST(FrameAuth, SessionKeyIsTheSameAtBothEndsAndBoundToTheTranscript) {
  const std::string token = "0123456789abcdef0123";
  const std::string hello = fm::encode_hello("host", std::string(32, 'c'), "", "", {}, "", "experiment=lat\n");
  const std::string nonce(32, 's');
  const std::string key = fm::session_key(token, hello, nonce, "host\n{}");
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(key, fm::session_key(token, hello, nonce, "host\n{}"));
  EXPECT_NE(key, fm::session_key(token, hello, std::string(32, 't'), "host\n{}"));
  EXPECT_NE(key, fm::session_key(token, hello, nonce, "host\n{\"cpu\":1}"));
  EXPECT_NE(key, fm::session_key(token + "x", hello, nonce, "host\n{}"));
  EXPECT_NE(key, fm::session_key(token, fm::encode_hello("host", std::string(32, 'd'), "", "", {}, "", "experiment=lat\n"),
                                 nonce, "host\n{}"));
}

std::string header(uint32_t len, fm::CtrlType t) {
  return {char(len), char(len >> 8), char(len >> 16), char(len >> 24), static_cast<char>(t)};
}

TEST(FrameAuth, HeaderCountsTheTagAndChecksTheTypeAfterIt) {
  fm::FrameHeader h;
  const auto check = [&](const std::string& hdr, fm::CtrlType expect) {
    return fm::check_frame_header(reinterpret_cast<const unsigned char*>(hdr.data()), expect, 1024, fm::kTagBytes, &h);
  };
  EXPECT_EQ(check(header(32 + 10, fm::CtrlType::exchange), fm::CtrlType::exchange), "");
  EXPECT_EQ(h.len, 10u);
  EXPECT_NE(check(header(31, fm::CtrlType::heartbeat), fm::CtrlType::exchange).find("shorter than"), std::string::npos);
  EXPECT_NE(check(header(33, fm::CtrlType::heartbeat), fm::CtrlType::exchange).find("exceeds its limit"), std::string::npos);
  EXPECT_NE(check(header(32 + 1025, fm::CtrlType::exchange), fm::CtrlType::exchange), "");
  EXPECT_EQ(check(header(32, fm::CtrlType::barrier), fm::CtrlType::exchange), "");  // the tag first
  EXPECT_NE(fm::check_frame_type(fm::CtrlType::barrier, fm::CtrlType::exchange), "");
}

// A server and a client channel over a socketpair, past the welcome, with
// a man in the middle's pipe: what the server sends is read back raw and
// forwarded to the client, changed or not.
struct Session {
  int s[2], c[2];
  fm::Ctrl server, client;
  Session() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, c), 0);
    server = fm::Ctrl(s[0], 1000);
    client = fm::Ctrl(c[0], 1000);
    server.send_then_authenticate(fm::CtrlType::welcome, "w", kKey, true);
    forward(take());
    EXPECT_EQ(client.recv(fm::CtrlType::welcome, "welcome"), "w");
    client.authenticate(kKey, false);
  }
  ~Session() {
    ::close(s[1]);
    ::close(c[1]);
  }
  std::string take() {  // one frame the server sent
    char hdr[5];
    EXPECT_EQ(::read(s[1], hdr, 5), 5);
    const uint32_t len = uint8_t(hdr[0]) | uint8_t(hdr[1]) << 8 | uint8_t(hdr[2]) << 16 | uint32_t(uint8_t(hdr[3])) << 24;
    std::string body(len, '\0');
    if (len) {
      EXPECT_EQ(::read(s[1], body.data(), len), static_cast<ssize_t>(len));
    }
    return std::string(hdr, 5) + body;
  }
  void forward(const std::string& frame) { ASSERT_EQ(::write(c[1], frame.data(), frame.size()), ssize_t(frame.size())); }
  std::string error(fm::CtrlType expect) {
    try {
      client.recv(expect, "test");
    } catch (const fm::Error& e) {
      EXPECT_EQ(e.kind, fm::ErrorKind::runtime);
      return e.what();
    }
    return "";
  }
};

TEST(FrameAuth, ChannelPassesFramesAndHeartbeatsThrough) {
  Session t;
  t.server.send(fm::CtrlType::exchange, "report");
  ASSERT_TRUE(t.server.send_heartbeat());
  t.server.send(fm::CtrlType::barrier);
  const std::string a = t.take(), beat = t.take(), b = t.take();
  EXPECT_EQ(beat.size(), 5 + fm::kTagBytes);
  t.forward(a);
  EXPECT_EQ(t.client.recv(fm::CtrlType::exchange, "test"), "report");
  t.forward(beat);
  EXPECT_EQ(t.client.peek(), fm::Ctrl::Peek::nothing);  // a verified heartbeat, swallowed
  t.forward(b);
  EXPECT_EQ(t.client.peek(), fm::Ctrl::Peek::message);
  EXPECT_NO_THROW(t.client.recv(fm::CtrlType::barrier, "test"));
}

TEST(FrameAuth, ChannelEndsOnAChangedFrame) {
  Session t;
  t.server.send(fm::CtrlType::exchange, "p50 86700");
  std::string f = t.take();
  f[7] ^= 1;
  t.forward(f);
  EXPECT_NE(t.error(fm::CtrlType::exchange).find("control frame 0 from the server failed authentication"), std::string::npos);
}

TEST(FrameAuth, ChannelEndsOnADroppedOrReplayedHeartbeat) {
  {
    Session t;
    ASSERT_TRUE(t.server.send_heartbeat());
    t.server.send(fm::CtrlType::exchange, "x");
    t.take();  // dropped
    t.forward(t.take());
    EXPECT_NE(t.error(fm::CtrlType::exchange).find("control frame 0 from the server failed"), std::string::npos);
  }
  {
    Session t;
    ASSERT_TRUE(t.server.send_heartbeat());
    const std::string beat = t.take();
    t.forward(beat + beat);
    EXPECT_EQ(t.client.peek(), fm::Ctrl::Peek::message);  // the replay is left for recv, which says so
    EXPECT_NE(t.error(fm::CtrlType::exchange).find("control frame 1 from the server failed"), std::string::npos);
  }
}

TEST(FrameAuth, ChannelEndsOnAFrameWithoutATag) {
  Session t;
  t.forward(header(4, fm::CtrlType::fail) + "lies");
  EXPECT_NE(t.error(fm::CtrlType::exchange).find("shorter than its authentication tag"), std::string::npos);
}

}  // namespace

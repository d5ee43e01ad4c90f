// Decoders of what the other end sends: malformed input is an fm::Error with a
// one-line reason, never another exception, never a read past the input.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "experiment/bw.hpp"
#include "experiment/check.hpp"
#include "experiment/oneway.hpp"
#include "experiment/stream.hpp"
#include "fabmeter/error.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/remote_parse.hpp"

namespace {

// The message of the fm::Error `f` throws; fails the test on any other outcome.
template <class F>
std::string fm_error(F f) {
  try {
    f();
  } catch (const fm::Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-fm exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted";
  return "";
}

}  // namespace

TEST(RemoteParse, NumbersMustBeWholeAndInRange) {
  EXPECT_EQ(fm::parse_remote_u64("0", "count"), 0u);
  EXPECT_EQ(fm::parse_remote_u64("18446744073709551615", "count"), UINT64_MAX);
  EXPECT_EQ(fm::parse_remote_u64("65535", "port", 65535), 65535u);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "abc", "18446744073709551616"})
    EXPECT_NE(fm_error([&] { fm::parse_remote_u64(bad, "count"); }), "") << bad;
  EXPECT_NE(fm_error([] { fm::parse_remote_u64("65536", "port", 65535); }).find("out of range"), std::string::npos);
  EXPECT_DOUBLE_EQ(fm::parse_remote_double("-12.5", "probe"), -12.5);
  for (const char* bad : {"", "nan", "inf", "1e999", " 1", "1.5x", "x"})
    fm_error([&] { fm::parse_remote_double(bad, "probe"); });
  // What the other end sent is shown printable and short.
  std::string junk(1000, '\n');
  const std::string m = fm_error([&] { fm::parse_remote_u64(junk, "count"); });
  EXPECT_LT(m.size(), 200u);
}

TEST(RemoteParse, DecodeParamsRefusesMalformedHellos) {
  fm::Params ok;
  ok.experiment = "lat";
  const std::string good = fm::encode_params(ok);
  EXPECT_NO_THROW(fm::decode_params(good));
  fm_error([&] { fm::decode_params(good + "size=64\n"); });               // a key twice
  fm_error([&] { fm::decode_params("experiment=lat\nsize\n"); });          // no '='
  fm_error([&] { fm::decode_params("experiment=lat\nno_such=1\n"); });
  fm_error([&] { fm::decode_params("experiment=lat\ns=64\n"); });          // short names are for the CLI
  fm_error([&] { fm::decode_params("experiment=lat\ndevice=a\rb\n"); });   // control character
  fm_error([&] { fm::decode_params("experiment=lat\ndevice=" + std::string(5000, 'x') + "\n"); });
  fm_error([&] { fm::decode_params(std::string(20000, '\n')); });
  fm_error([&] { fm::decode_params("experiment=lat\nsize=99999999999G\n"); });   // overflows
  fm_error([&] { fm::decode_params("experiment=lat\nwarmup=18446744073709551615\n"); });  // not -1 by wrap-around
  fm_error([&] { fm::decode_params("experiment=lat\ngid_index=4294967296\n"); });
}

TEST(RemoteParse, ZeroIsNotAuto) {
  for (const char* opt : {"-n", "--count", "--iters"}) {
    fm::Params p;
    p.experiment = std::string(opt) == "--count" ? "stream" : "lat";
    const std::string m = fm_error([&] { fm::parse_options(p, {opt, "0"}); });
    EXPECT_NE(m.find("auto"), std::string::npos) << m;
  }
  fm::Params p;
  p.experiment = "lat";
  fm::parse_options(p, {"-n", "auto", "--warmup", "0"});
  EXPECT_EQ(p.iters, 0u);
  EXPECT_EQ(p.warmup, 0);
  EXPECT_NE(fm::encode_params(p).find("iters=auto\n"), std::string::npos);  // the default prints as auto
}

TEST(RemoteParse, BwCountsAreChecked) {
  fm::BwSide b{5, 4, 3, 1.5, 2.5, 0, 1e6, {1, 2}};
  fm::BwSide d = fm::BwSide::decode(b.encode());
  EXPECT_EQ(d.sent, 5u);
  EXPECT_EQ(d.measured, 3u);
  EXPECT_DOUBLE_EQ(d.send_ns, 2.5);
  EXPECT_EQ(d.series, (std::vector<uint64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(d.series_bin_ns, 1e6);
  // The series must hold exactly its announced bins and sum to the measured count.
  for (const char* bad : {"", "1 2 3 4", "1 2 3 4 5 6", "a b c d e", "1 2 3 4 nan", "1 2 3 -4 5", "1 2 9 4 5",
                          "1  2 3 4 5", "-1 2 3 4 5", "5 4 3 1 2 0 1000 2 1 1", "5 4 3 1 2 0 1000 2 1 2 0",
                          "5 4 3 1 2 0 1000 1 3 3", "5 4 3 1 2 0 1000 513 3"})
    fm_error([&] { fm::BwSide::decode(bad); });
}

TEST(RemoteParse, ClockProbeAnswersAreChecked) {
  const fm::ClockProbe ok = fm::read_probe_answer("123456789.250 800.000", 1000, 21000);
  EXPECT_EQ(ok.remote_ns, 123456789.25);
  EXPECT_EQ(ok.turnaround_ns, 800);
  EXPECT_EQ(ok.delay_ns(), 19200);
  EXPECT_NE(fm_error([] { fm::read_probe_answer("123456789.250", 0, 1e4); }).find("TIME TURNAROUND"), std::string::npos);
  fm_error([] { fm::read_probe_answer("", 0, 1e4); });
  fm_error([] { fm::read_probe_answer("nan 1", 0, 1e4); });
  fm_error([] { fm::read_probe_answer("1 2 3", 0, 1e4); });
  fm_error([] { fm::read_probe_answer("1  2", 0, 1e4); });
  EXPECT_NE(fm_error([] { fm::read_probe_answer("1 -5", 0, 1e4); }).find("does not fit"), std::string::npos);
  fm_error([] { fm::read_probe_answer("1 20000", 0, 1e4); });  // longer than the round trip
}

TEST(RemoteParse, StampReportsAreChecked) {
  const fm::Clock clk(false);
  fm::OnewayReport r{fm::ClockInfo::of(clk), 2, 0, 0, 3, 0};
  std::string blob(sizeof r + 3 * 8, '\0');
  std::memcpy(blob.data(), &r, sizeof r);
  fm::OnewayReport h;
  EXPECT_NO_THROW(fm::read_stamp_report(blob, 3, &h, "oneway"));
  fm_error([&] { fm::read_stamp_report(blob.substr(0, 10), 3, &h, "oneway"); });
  fm_error([&] { fm::read_stamp_report(blob, 4, &h, "oneway"); });
  r.received = 4;  // more than were sent
  std::memcpy(blob.data(), &r, sizeof r);
  fm_error([&] { fm::read_stamp_report(blob, 3, &h, "oneway"); });
  r.received = 2;
  // With send_stamps 1 a second array (t_send) follows: its size must be there, and 0 or 1 only.
  r.send_stamps = 1;
  std::memcpy(blob.data(), &r, sizeof r);
  fm_error([&] { fm::read_stamp_report(blob, 3, &h, "oneway"); });
  std::string both = blob + std::string(3 * 8, '\0');
  EXPECT_NO_THROW(fm::read_stamp_report(both, 3, &h, "oneway"));
  r.send_stamps = 2;
  std::memcpy(both.data(), &r, sizeof r);
  fm_error([&] { fm::read_stamp_report(both, 3, &h, "oneway"); });
  r.send_stamps = 0;
  std::memcpy(blob.data(), &r, sizeof r);
  r.clock.ns_per_tick = std::nan("");
  std::memcpy(blob.data(), &r, sizeof r);
  fm_error([&] { fm::read_stamp_report(blob, 3, &h, "oneway"); });

  fm::CheckReport c{};
  c.clock = fm::ClockInfo::of(clk);
  c.received = 9;
  std::string cb(reinterpret_cast<const char*>(&c), sizeof c);
  EXPECT_NO_THROW(fm::read_check_report(cb, 9));
  fm_error([&] { fm::read_check_report(cb, 8); });
  fm_error([&] { fm::read_check_report(cb + "x", 9); });
}

// A sample shorter than its header, or one whose header lies about its
// values, is counted corrupted and never read past its end (ASan would see).
TEST(RemoteParse, ShortOrLyingSamplesAreCountedNotRead) {
  const fm::Clock clk(false);
  fm::Sink sink("memory", clk, 2);
  std::vector<uint64_t> t_recv(4);
  fm::SinkReport r{};
  uint64_t last = 0;
  for (uint32_t len : {0u, 1u, 23u}) {
    std::vector<std::byte> msg(len, std::byte{0});
    fm::sink_arrival(msg.data(), len, 7, 4, t_recv.data(), sink, r, last);
  }
  EXPECT_EQ(r.corrupted, 3u);
  EXPECT_EQ(r.received, 0u);
  fm::SampleHeader h{1, 0, 1000000, 0};  // claims a million values in a 24-byte message
  std::vector<std::byte> msg(sizeof h);
  std::memcpy(msg.data(), &h, sizeof h);
  fm::sink_arrival(msg.data(), sizeof h, 7, 4, t_recv.data(), sink, r, last);
  EXPECT_EQ(r.corrupted, 4u);
  EXPECT_EQ(r.received, 1u);
  fm::sink_arrival(msg.data(), sizeof h, 8, 4, t_recv.data(), sink, r, last);
  EXPECT_EQ(r.duplicated, 1u);
  EXPECT_EQ(r.received, 1u);
}

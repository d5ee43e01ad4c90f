#include <gtest/gtest.h>

#include "fabmeter/error.hpp"
#include "fabmeter/params.hpp"
#include "fabmeter/session.hpp"

using fm::Params;

TEST(Params, ParsesLongShortAndSuffixes) {
  Params p;
  p.experiment = "bw";
  fm::parse_options(p, {"-t", "tcp", "--size=64K", "--poll", "event", "-n", "500", "--bidir", "--tx-depth", "16"});
  EXPECT_EQ(p.transport, "tcp");
  EXPECT_EQ(p.size, 65536u);
  EXPECT_EQ(p.poll, fm::Poll::event);
  EXPECT_EQ(p.iters, 500u);
  EXPECT_TRUE(p.bw.bidir);
  EXPECT_EQ(p.bw.tx_depth, 16u);
  EXPECT_NO_THROW(fm::validate(p));
}

TEST(Params, RoundTripsThroughControlChannelEncoding) {
  Params p;
  p.experiment = "oneway";
  fm::parse_options(p, {"-t", "udp", "--bursts", "3", "--burst-size", "7", "--pause-us", "2.5"});
  Params q = fm::decode_params(fm::encode_params(p));
  EXPECT_EQ(fm::encode_params(p), fm::encode_params(q));
  EXPECT_EQ(q.oneway.bursts, 3u);
  EXPECT_DOUBLE_EQ(q.oneway.pause_us, 2.5);
}

static fm::ErrorKind kind_of(std::initializer_list<std::string> args, const char* exp = "lat") {
  Params p;
  p.experiment = exp;
  try {
    fm::parse_options(p, args);
    fm::validate(p);
  } catch (const fm::Error& e) {
    return e.kind;
  }
  return fm::ErrorKind::runtime;  // "no error" marker for the tests below
}

TEST(Params, RefusesBadInput) {
  EXPECT_EQ(kind_of({"--service", "ud"}), fm::ErrorKind::usage);     // verbs only, transport is shm
  EXPECT_EQ(kind_of({"-t", "tcp", "--rq-depth", "8"}), fm::ErrorKind::usage);
  EXPECT_EQ(kind_of({"-t", "tcp", "--service", "rc"}), fm::ErrorKind::usage);  // at its default, still refused
  EXPECT_EQ(kind_of({"-s", "0"}), fm::ErrorKind::usage);
  EXPECT_EQ(kind_of({"-s", "12x"}), fm::ErrorKind::usage);
  EXPECT_EQ(kind_of({"--bursts", "3"}), fm::ErrorKind::usage);  // oneway only
  EXPECT_EQ(kind_of({"-n", "5", "--duration", "1"}), fm::ErrorKind::usage);
  EXPECT_EQ(kind_of({"--no-such"}), fm::ErrorKind::usage);
  EXPECT_EQ(kind_of({"-n"}), fm::ErrorKind::usage);
  EXPECT_EQ(kind_of({"-s", "32"}), fm::ErrorKind::runtime);
}

TEST(Params, SweepSizes) {
  Params p;
  p.experiment = "lat";
  p.sweep = true;
  p.max_size = 1 << 20;
  auto sizes = fm::sizes_for(p, 65507);
  ASSERT_EQ(sizes.size(), 16u);  // 1 .. 32768
  EXPECT_EQ(sizes.front(), 1u);
  EXPECT_EQ(sizes.back(), 32768u);
}

TEST(Params, UnknownTransportIsAUsageError) {
  Params p;
  p.experiment = "lat";
  p.transport = "carrier-pigeon";
  try {
    fm::transport_caps(p);
    FAIL() << "no error";
  } catch (const fm::Error& e) {
    EXPECT_EQ(e.kind, fm::ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("shm"), std::string::npos);  // lists what is built in
  }
}

TEST(Params, MessagesNameTheOptionAsTyped) {
  Params p;
  p.experiment = "oneway";
  try {
    fm::parse_options(p, {"--burst-size", "x"});
    FAIL() << "no error";
  } catch (const fm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--burst-size:"), std::string::npos) << e.what();
  }
  try {
    fm::parse_options(p, {"--sq-depth", "99999999999"});
    FAIL() << "no error";
  } catch (const fm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sq-depth:"), std::string::npos) << e.what();
  }
}

// The exported types are what the Python CLI builds argparse and suite
// checks from: every choice's default is one of its values, every typed
// default reads back through the option's own parser, and flags are bools.
TEST(Params, TypedTableIsConsistent) {
  fm::Params defaults;
  for (const auto& o : fm::option_table()) {
    const std::string v = fm::typed_value(o, defaults);
    SCOPED_TRACE(o.name);
    EXPECT_NE(std::string(o.group), "");
    if (o.type == fm::OptType::choice && *o.values) {
      EXPECT_TRUE(fm::in_list(o.values, o.get(defaults)));
    }
    if (o.type == fm::OptType::flag) {
      EXPECT_TRUE(v == "false" || v == "true");
      EXPECT_STREQ(o.metavar, "");
    } else {
      EXPECT_STRNE(o.metavar, "");
    }
    if (o.type == fm::OptType::list) {
      EXPECT_EQ(v.front(), '[');
    }
    if (o.accepts_auto && o.get(defaults) == "auto") {
      EXPECT_EQ(v, "\"auto\"");
    }
    fm::Params back;
    o.set(back, o.get(defaults));
    EXPECT_EQ(o.get(back), o.get(defaults));
  }
  const std::string j = fm::params_json(defaults);
  EXPECT_NE(j.find("\"tx_depth\": 128"), std::string::npos) << j;
  EXPECT_NE(j.find("\"bidir\": false"), std::string::npos) << j;
  EXPECT_NE(j.find("\"rate\": [1000]"), std::string::npos) << j;
}

// A value other than the default for each option, as its setter takes it.
static std::string other_value(const fm::OptSpec& o, const Params& p) {
  switch (o.type) {
    case fm::OptType::flag: return "1";
    case fm::OptType::list: return "7,9";
    case fm::OptType::choice: {
      std::string_view values = *o.values ? o.values : "tcp,udp";  // transport: any but the default
      while (true) {
        auto c = values.find(',');
        std::string v(values.substr(0, c));
        if (v != o.get(p)) return v;
        values.remove_prefix(c + 1);
      }
    }
    case fm::OptType::text: {
      const std::string name = o.name;
      return name == "sink" ? "file:x.csv" : name == "io-cpu" ? "none" : name == "time-thread" ? "3"
             : name == "ops" ? "send,read" : "something";
    }
    default: return "7";
  }
}

// Every group of p other than `group` compares equal to the same group of q.
template <class... G>
static std::vector<std::string> changed_groups(const Params& p, const Params& q, std::tuple<G...>*) {
  std::vector<std::string> out;
  ((fm::group_of<G>(p) == fm::group_of<G>(q) ? void() : out.push_back(G::kGroup)), ...);
  return out;
}

TEST(Params, EachOptionWritesOnlyItsOwnGroup) {
  for (const auto& o : fm::option_table()) {
    const Params before;
    Params after;
    o.set(after, other_value(o, before));
    EXPECT_NE(o.get(after), o.get(before)) << o.name;
    const auto changed = changed_groups(before, after, static_cast<fm::OptionGroups*>(nullptr));
    EXPECT_EQ(changed, std::vector<std::string>{o.group}) << o.name;
  }
}

TEST(Params, OpsGiveEachConnectionItsOpInTurn) {
  Params p;
  fm::parse_options(p, {"--ops", "send,read,write", "--flows", "2"});
  EXPECT_EQ(fm::ops_of(p.rdma), (std::vector<std::string>{"send", "read", "write"}));
  EXPECT_EQ(fm::op_option(p.rdma), "--ops send,read,write");
  for (uint32_t i = 0; i < 6; ++i) {
    const Params c = fm::for_connection(p, i);
    EXPECT_EQ(c.rdma.op, p.rdma.ops[i % 3]) << i;
    EXPECT_TRUE(c.rdma.ops.empty()) << i;
  }
  EXPECT_EQ(fm::decode_params(fm::encode_params(p)).rdma.ops, p.rdma.ops);  // the server makes the same connections
  Params one;
  EXPECT_EQ(fm::ops_of(one.rdma), std::vector<std::string>{"send"});
  EXPECT_EQ(fm::op_option(one.rdma), "--op send");
  EXPECT_EQ(fm::for_connection(one, 3).rdma.op, "send");
  for (const char* bad : {"send,,read", "send,", "send,send", "recv"}) EXPECT_THROW(fm::parse_options(one, {"--ops", bad}), fm::Error) << bad;
}

TEST(Params, TimeThreadIsAutoOffOrACpu) {
  const auto* o = fm::find_option("time-thread");
  Params p;
  EXPECT_EQ(o->get(p), "auto");
  for (const char* v : {"off", "auto", "3"}) {
    o->set(p, v);
    EXPECT_EQ(o->get(p), v);
  }
  o->set(p, "007");  // a number is kept as the number it is
  EXPECT_EQ(o->get(p), "7");
  for (const char* bad : {"", "x", "-1", "1.5", "99999"}) EXPECT_THROW(o->set(p, bad), fm::Error) << bad;
}

TEST(Params, OptionTransportsComeFromTheGroupsTransportsRead) {
  EXPECT_EQ(fm::transports_reading("common"), "all");
  EXPECT_EQ(fm::transports_reading("bw"), "all");  // --tx-depth: every transport; binds where sends complete
  const auto* rq = fm::find_option("rq-depth");
  for (const char* t : {"shm", "verbs", "ofi"}) {
    EXPECT_TRUE(fm::in_list(rq->transports, t)) << t;
  }
  for (const char* t : {"tcp", "udp", "zmq"}) {
    EXPECT_FALSE(fm::in_list(rq->transports, t)) << t;
  }
  EXPECT_EQ(fm::find_option("service")->transports, "verbs");
  const auto* endpoint = fm::find_option("endpoint");
  for (const char* t : {"zmq", "nng", "nanomsg"}) EXPECT_TRUE(fm::in_list(endpoint->transports, t)) << t;
  for (const char* t : {"tcp", "shm", "ofi"}) EXPECT_FALSE(fm::in_list(endpoint->transports, t)) << t;
}

// Helpers shared by the socket transports: data addresses follow the control
// connection, so two-host runs need no extra flags.
#pragma once
#include <sys/socket.h>

#include <string>

#include "fabmeter/ctrl.hpp"
#include "fabmeter/transport.hpp"

namespace fm::sock {

// Numeric IPv4/IPv6 address and port -> sockaddr; returns its length.
int to_sockaddr(const std::string& host, uint16_t port, sockaddr_storage* ss);
// A socket of `type` bound to the address this end of `ctrl` uses, port 0.
int bind_near(const Ctrl& ctrl, int type, uint16_t* port);
// Fills a sockaddr for the other end's control address with `port`.
int remote_sockaddr(const Ctrl& ctrl, uint16_t port, sockaddr_storage* ss);
void set_rcv_timeout_ms(int fd, int ms);
// Asks for `bytes` (forcing past rmem_max when privileged); returns what was granted.
int set_buf(int fd, int opt, int force_opt, int bytes);
int get_int_opt(int fd, int level, int opt);
// TCP_CONGESTION: set to `name` ("": left at the kernel's default), a name the kernel refuses a usage error
// with the list it offers; and the one a socket uses.
void set_congestion(int fd, const std::string& name);
std::string congestion_of(int fd);
// Bytes waiting in fd's receive and send buffers, beside their sizes.
Pools pools(int fd, int rcvbuf, int sndbuf);

}  // namespace fm::sock

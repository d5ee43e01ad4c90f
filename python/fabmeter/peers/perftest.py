"""perftest (linux-rdma/perftest) over RDMA verbs: ib_{send,write,read}_{lat,bw}
and ib_atomic_{lat,bw}; RC unless --service says UC (send, write) or UD
(send), with fabmeter's --inline (-I: send and write), --mtu (-m) and, for
the bw tools, --bidir (-b: both ends send at once, and perftest reports
the sum of both directions). QPs connected perftest's way (their numbers
over its socket: fabmeter's --cm raw) or, with --cm rdma_cm, by rdma_cm
(-R: RC and UD; the devices, the path MTU and the GID follow the
addresses, so UC, --mtu but for UD, and --gid-index are refused, as
fabmeter's verbs refuses them: Rdma.cm_conflict).

The server is ready when it listens. perftest -R opens no socket at all
(its own handshake runs over an rdma_cm connection too: rdma_bind_addr and
rdma_listen on the port), and a client that comes early is rejected and
exits (perftest 4.5's rdma_client_connect retries address and route
errors only). So readiness is the kernel's own view: the server's process
holding a cm_id in state LISTEN on the port, as iproute2's `rdma res show
cm_id` lists it (netlink; the `fabmeter serve` that runs a remote server
side looks the same way). Retrying the client while it says it found no
listener would also work, but each try costs a client start and the
"rejected" it would key on is not only a missing listener's. rdma_cm
follows addresses, so a client on the server's host connects to the
server device's address (device_address), not to loopback.

What perftest reports: the lat tools (-n iterations) print t_min, t_max,
t_typical (the median), t_avg, t_stdev and the 99 % and 99.9 % percentiles
in usec over every iteration; for send and write (ping-pong) each sample is
half the round trip, for read and atomics (one-sided: the requester waits
for the response) the whole operation. The bw tools run for --duration
seconds (-D, with perftest's own margin at both ends left out) and print
the average bandwidth (--report_gbits: Gbit/s, 10^9 bit/s) and message rate
(Mpps) over the measured period, and #iterations, the messages in it (the
count CPU per message divides by); it times with the TSC at a clock rate
it estimates, and where the estimate is shaky (a virtual machine) it warns
("Correlation coefficient r^2 ... < 0.9"), kept as tool_warnings: under
Soft-RoCE in a TCG guest its write and read bandwidth then print as 0; --cpu_util adds CPU_Util[%], perftest's own
reading of the CPU (from /proc/stat, the whole machine's CPUs, any
process), which perftest prints only in duration mode, so only the bw tools
have it. Local runs need an RDMA device here (--device, --server-device).
"""

from __future__ import annotations

import ipaddress
import math
import re
import shutil
from pathlib import Path
from typing import Optional

from fabmeter.peers.base import (Case, PeerRun, Peer, PeerError, Rdma, Unsupported, percentile_key, pinned, point,
                                 probe_version, us_to_ns)

SYSFS_IB = Path("/sys/class/infiniband")
OPS = ("send", "write", "read", "atomic")
ONE_SIDED = ("read", "atomic")
NOTE_LAT = ("perftest {tool} -n ITERS, {conn}: t_typical is the median, percentiles and mean over every iteration, "
            "each sample {what}")
NOTE_BW = ("perftest {tool} -D SECONDS --report_gbits, {conn}: average bandwidth and message rate over the measured "
           "period (perftest's margins left out){both}")
BOTH_WAYS = "; -b: the sum of both directions"
TOOL_CPU_NOTE = ("perftest's own --cpu_util: the whole machine's CPUs busy over its measured period, in % "
                 "(its reading of /proc/stat, any process), on the client's host")
# perftest times with the TSC and its own estimate of the CPU's clock; where that estimate is shaky
# (a virtual machine) it says so, and its figures are then to be read with that in mind. It also says
# when it turns -I off for a device it does not know to inline (rxe).
_WARNING = re.compile(r"^.*(?:Correlation coefficient|Conflicting CPU frequency|inline feature).*$", re.M)
_ERROR = re.compile(r"^.*(?:Couldn't|Unable|error|Error|failed|not supported).*$", re.M)


def _ran(text: str) -> dict:
    """What perftest's banner says it ran: its connection type, MTU, inline size, rdma_cm, both directions
    (evidence of the knobs, not what was asked)."""
    ran: dict = {"service": "RC"}
    for pattern, key, value in ((r"Connection type\s*:\s*(\w+)", "service", str),
                                (r"Mtu\s*:\s*(\d+)\[B\]", "mtu", int),
                                (r"Max inline data\s*:\s*(\d+)\[B\]", "inline", int),
                                (r"rdma_cm QPs\s*:\s*(\w+)", "cm", lambda on: "rdma_cm" if on == "ON" else "raw")):
        m = re.search(pattern, text)
        if m:
            ran[key] = value(m.group(1))
    if re.search(r"^\s*\S.*Bidirectional.*Test\s*$", text, re.M):
        ran["bidir"] = True
    return ran


def device_address(device: Optional[str]) -> str:
    """The IPv4 address of an RDMA device here (its first IPv4-mapped GID): where a client on the same host
    connects with rdma_cm, which follows addresses (loopback's leads to no RDMA device)."""
    if device is None:
        raise Unsupported("--cm rdma_cm on one host needs --server-device: the client connects to its address")
    for gid in sorted((SYSFS_IB / device / "ports").glob("*/gids/*")):
        try:
            mapped = ipaddress.IPv6Address(gid.read_text().strip()).ipv4_mapped
        except (OSError, ValueError):
            continue
        if mapped is not None and not mapped.is_unspecified:
            return str(mapped)
    raise Unsupported(f"--cm rdma_cm: the RDMA device {device} has no IPv4 address (GID) here to connect to")


def _columns(header: str) -> list[str]:
    """perftest's header row -> column names: '#bytes', 'BW average[Gb/sec]', '99% percentile[usec]', ..."""
    return re.findall(r"#\w+|(?:[\w.%]+ )?[\w.%]+\[[^\]]*\]|[\w.%]+", header.strip())


class Perftest(Peer):
    def __init__(self):
        super().__init__(tool="perftest", package="perftest",
                         cases=tuple(Case(exp, "verbs", f"ib_{op}_{exp}") for op in OPS for exp in ("lat", "bw")),
                         server_exits_alone=True, poll="busy", bidir=True, verbs_knobs=True)

    def available(self) -> bool:
        return shutil.which("ib_send_lat") is not None

    def version(self) -> Optional[str]:
        return probe_version(("ib_send_lat", "--version"), r"(\d[\d.]*\S*)")

    def request(self, case: Case, params: PeerRun) -> dict:
        rdma = params.rdma or Rdma()
        knobs = self.knobs(case, params)
        req: dict = {"tool": case.variant, "conn": knobs["conn"],
                     "lifetime_s": math.ceil(params.duration + params.timeout_s)}
        if not case.variant.startswith("ib_atomic_"):
            req["size"] = case.size(params)
        if case.experiment == "lat":
            req["iters"] = params.iters
        else:
            req["duration_s"] = self.seconds(params)
        for key in ("inline", "mtu", "bidir"):
            if knobs[key]:
                req[key] = knobs[key]
        if knobs["cm"] == "rdma_cm":
            req["cm"] = "rdma_cm"
        if rdma.server_device:
            req["device"] = rdma.server_device
        if rdma.gid_index is not None:
            req["gid_index"] = rdma.gid_index
        if rdma.ib_port is not None:
            req["ib_port"] = rdma.ib_port
        return req

    def listens(self, case: Case, params: PeerRun) -> str:
        return "rdma_cm" if self.knobs(case, params)["cm"] == "rdma_cm" else "tcp"

    @staticmethod
    def knobs(case: Case, params: PeerRun) -> dict:
        """What --service, --inline, --mtu, --cm and --bidir ask of this test, as perftest takes them; a test
        that cannot do what is asked is skipped (Unsupported) with perftest's own rule."""
        rdma = params.rdma or Rdma()
        op = case.variant[3:].rsplit("_", 1)[0]
        conn = rdma.service.upper()
        why = rdma.cm_conflict()
        if why:
            raise Unsupported(f"perftest {case.variant}: {why}")
        if conn != "RC" and not (op == "send" or (op == "write" and conn == "UC")):
            raise Unsupported(f"perftest {case.variant} runs over RC only (UC: send and write; UD: send)")
        if rdma.inline and op not in ("send", "write"):
            raise Unsupported(f"perftest {case.variant}: --inline applies to send and write only")
        return {"conn": conn, "inline": rdma.inline, "mtu": rdma.mtu, "cm": rdma.cm,
                "bidir": params.bidir and case.experiment == "bw"}

    @staticmethod
    def seconds(params: PeerRun) -> int:
        return max(1, math.ceil(params.duration))

    def command(self, role: str, case: Case, params: PeerRun, port: int) -> list[str]:
        if params.server is None and not any(SYSFS_IB.glob("*")):
            raise Unsupported(f"no RDMA device on this host ({SYSFS_IB})")
        rdma = params.rdma
        device = (rdma.client_device if role == "client" else rdma.server_device) if rdma else None
        knobs = self.knobs(case, params)
        argv = [case.variant, "-p", str(port), "-F", "-c", knobs["conn"]]
        if knobs["inline"]:
            argv += ["-I", str(knobs["inline"])]
        if knobs["mtu"]:
            argv += ["-m", str(knobs["mtu"])]
        if knobs["bidir"]:
            argv.append("-b")
        if knobs["cm"] == "rdma_cm":
            argv.append("-R")
        if device:
            argv += ["-d", device]
        if rdma is not None and rdma.ib_port is not None:
            argv += ["-i", str(rdma.ib_port)]
        if rdma is not None and rdma.gid_index is not None:
            argv += ["-x", str(rdma.gid_index)]
        if not case.variant.startswith("ib_atomic_"):   # atomics move 8 B, their own size
            argv += ["-s", str(case.size(params))]
        if case.experiment == "lat":
            argv += ["-n", str(params.iters)]
        else:
            argv += ["-D", str(self.seconds(params))]
            if role == "client":
                argv += ["--cpu_util", "--report_gbits"]
        if role == "client":
            local_cm = params.server is None and knobs["cm"] == "rdma_cm"
            argv.append(device_address(rdma.server_device) if local_cm else params.host)
        return pinned(argv, params.client_cpu if role == "client" else params.server_cpu)

    def parse(self, text: str, case: Case) -> list[dict]:
        lines = text.splitlines()
        row = None
        for i, line in enumerate(lines):
            if "#bytes" in line:
                names = _columns(line)
                for data in lines[i + 1:]:
                    values = data.split()
                    if values and re.fullmatch(r"\d+", values[0]):
                        row = dict(zip(names, values))
                        break
        if row is None:
            err = _ERROR.search(text)
            if err:
                raise PeerError(err.group(0).strip())
            return []
        try:
            fields = {k: float(v) for k, v in row.items()}
        except ValueError as e:
            raise PeerError(f"perftest printed a result that is not a number: {e}") from e
        # A t_stdev of -nan beside finite times is perftest's own arithmetic (seen at 8 MiB, 10 iterations):
        # the point stands without it. Any other figure inf/nan: its TSC rate estimate failed, the machine's
        # fault, not the path's; no figure to keep.
        unfit = [k for k, v in fields.items() if not math.isfinite(v)]
        if unfit and unfit != ["t_stdev[usec]"]:
            warned = _WARNING.search(text)
            raise Unsupported("perftest's clock estimate failed on this machine, its figures are inf/nan"
                              + (f" ({warned.group(0).strip()})" if warned else ""))
        for k in unfit:
            del fields[k]
        extra = {"size": int(fields["#bytes"]), **_ran(text), "op": case.variant[3:].rsplit("_", 1)[0]}
        warnings = [m.group(0).strip() for m in _WARNING.finditer(text)]
        warnings += [f"perftest printed {k} as {row[k]}: left out" for k in unfit]
        if warnings:
            extra["tool_warnings"] = warnings
        if "#iterations" in fields:
            extra["iterations"] = int(fields["#iterations"])
        one_sided = extra["op"] in ONE_SIDED
        if case.experiment == "lat":
            stats = {}
            for name, key in (("t_min[usec]", "min"), ("t_max[usec]", "max"), ("t_typical[usec]", "p50"),
                              ("t_avg[usec]", "mean"), ("t_stdev[usec]", "stdev")):
                if name in fields:
                    stats[key] = us_to_ns(fields[name])
            for name, value in fields.items():
                m = re.fullmatch(r"([\d.]+)% percentile\[usec\]", name)
                if m:
                    stats[percentile_key(m.group(1))] = us_to_ns(value)
            if "p50" not in stats and "mean" not in stats:
                return []
            what = "a whole operation (request and response)" if one_sided else "half a round trip"
            note = NOTE_LAT.format(tool=case.variant, what=what, conn=extra["service"])
            if one_sided:
                return [point("perftest", case, latency_kind="rtt", statistic_note=note, rtt_ns=stats,
                              tool_binary=case.variant, **extra)]
            return [point("perftest", case, latency_kind="rtt/2", statistic_note=note, latency_ns=stats,
                          tool_binary=case.variant, **extra)]
        bw = next((v for k, v in fields.items() if k.startswith("BW average")), None)
        unit = next((k for k in fields if k.startswith("BW average")), "")
        if bw is None:
            return []
        if "[Gb/sec]" not in unit:
            raise PeerError(f"perftest bandwidth in {unit!r}, expected Gb/sec (--report_gbits)")
        note = NOTE_BW.format(tool=case.variant, conn=extra["service"], both=BOTH_WAYS if extra.get("bidir") else "")
        p = point("perftest", case, statistic_note=note, gbps=bw, tool_binary=case.variant, **extra)
        if "MsgRate[Mpps]" in fields:
            p["msg_rate"] = fields["MsgRate[Mpps]"] * 1e6
        cpu = next((v for k, v in fields.items() if k.startswith("CPU_Util")), None)
        if cpu is not None:
            p["tool_cpu"] = {"cpu_util_pct": cpu, "note": TOOL_CPU_NOTE}
        return [p]


    def _raw_name(self, case: Case, params: PeerRun) -> str:
        return f"{case.variant}-{case.size(params)}B.txt"


PEER = Perftest()

"""perftest's and fabtests' own cases: exit 0 and a result line, parsed."""
import re

from .read import read


PERFTEST_COLS = ["bytes", "iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p999"]
# ib_*_bw: MB/sec columns (perftest's MB), and the message rate in millions per second.
PERFTEST_BW_COLS = ["bytes", "iterations", "bw_peak_mb", "bw_avg_mb", "msg_rate_mpps"]


def check_perftest(raw, name):
    cmd = read(f"{raw}/{name}.cmd").strip()
    rc = int(read(f"{raw}/{name}.rc", "-1").strip() or -1)
    out = read(f"{raw}/{name}.out")
    summary = {"name": name, "cmd": cmd, "rc": rc}
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}: {out.strip()[-300:]}")
    # ib_write_lat's client prints "inf" on rxe; its server measures the same
    # ping-pong (each side times its own round trips), so fall back to it.
    for side in ("out", "server.out"):
        result = perftest_result(read(f"{raw}/{name}.{side}"))
        if result:
            summary["result_us"], summary["result_from"] = result, "client" if side == "out" else "server"
            break
    else:
        if rc == 0 and name.startswith("cmp-"):
            # A comparison round the peer could not time (perftest prints
            # "inf" on both ends now and then under rxe): the round has no
            # figure on that side, which the table shows; nothing of ours failed.
            summary["note"] = "no finite result line (the round counts for nothing)"
        else:
            problems.append("no finite result line in perftest's output")
    return problems, summary


def perftest_result(text):
    lines = text.splitlines()
    for i, line in enumerate(lines):
        # libfabric's tools (fi_pingpong, fabtests' fi_msg_bw and fi_rma_bw): sizes
        # and counts as "1k", "=2k"; usec/xfer is the mean of RTT/2 in a
        # pingpong, wall time per message in a bw test.
        if "usec/xfer" in line:
            head = line.split()
            for row in lines[i + 1:]:
                cells = row.split()
                if len(cells) == len(head) and re.fullmatch(r"[\d.]+", cells[head.index("usec/xfer")]):
                    return {"usec_per_xfer": float(cells[head.index("usec/xfer")])}
            continue
        if "t_typical" in line:
            cols = PERFTEST_COLS
        elif "MsgRate" in line:
            cols = PERFTEST_BW_COLS
        else:
            continue
        for row in lines[i + 1:]:
            nums = row.split()
            if len(nums) >= 5 and all(re.fullmatch(r"[\d.]+", x) for x in nums[:5]):
                return dict(zip(cols, map(float, nums)))
    return None

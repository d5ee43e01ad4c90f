"""The fault cases (NAME.fault): the survivor's end after kill -9 or SIGSTOP."""
import re

from .read import json_lines, nonempty_lines, read, read_kv


# Faults (the guest's "verbs: faults" section): the bound for the
# surviving side, plus what TCG adds between the signal and the observed end.
# The bound itself covers the detection (EOF at once; a frozen peer after
# 3 s without a heartbeat, beats every 1 s); the slack covers what emulation
# stretches after that: the survivor tearing down its QPs, CQs and MRs in the
# emulated rxe driver (~0.5-1 s per process under TCG, from the cases' own
# timings) and the guest script's 50 ms polling, on 2 vCPUs the fault loop
# shares with the engines.
FAULT_NOTICE_S = 5.0
FAULT_TCG_SLACK_S = 3.0


def check_fault(raw, name):
    """Returns (problems, summary) for one fault case (NAME.fault and friends)."""
    kv = read_kv(f"{raw}/{name}.fault")
    summary = {"name": name, **kv}
    problems = []
    if not kv:
        return ["no NAME.fault written (the case did not finish?)"], summary
    bound = FAULT_NOTICE_S + FAULT_TCG_SLACK_S
    if kv.get("serve_alive") != "1":
        problems.append("fabmeter serve itself died")
    if kv.get("sessions_left"):
        problems.append(f"session processes left in the server: {kv['sessions_left']}")
    if kv.get("next_rc") != "0":
        tail = nonempty_lines(read(f"{raw}/{name}.next.err"))[-1:] or ["(no stderr)"]
        problems.append(f"the next normal client failed (exit {kv.get('next_rc')}): {tail[0]}")
    if kv.get("struck") != "1":
        return problems, summary  # the run ended before the fault: only the aftermath counts
    try:
        took = float(kv.get("took_s", ""))
    except ValueError:
        took = None
    summary["took_s"] = took
    if kv.get("victim") == "server":
        rc = kv.get("client_rc")
        err = nonempty_lines(read(f"{raw}/{name}.err"))
        if rc != "3":
            problems.append(f"the client exited {rc}, expected 3: {err[-1:] or '(no stderr)'}")
        if len(err) != 1 or not err[0].startswith("fabmeter-engine: error: "):
            problems.append(f"the client should print one error line, got {err!r}")
        lines = json_lines(read(f"{raw}/{name}.out"))
        end = [l for l in lines if l.get("type") == "end"]
        if not end or end[-1].get("status") != "failed":
            problems.append(f"the client's end line should say failed: {end[-1] if end else 'missing'}")
        points = [l for l in lines if l.get("type") == "point"]
        if kv.get("phase") == "point" and not points:
            problems.append("struck in the point, yet no point line was kept")
        if points and points[-1].get("partial") is not True:
            problems.append("the point cut short is not kept as partial")
        summary["message"] = err[0] if err else ""
        summary["points_kept"] = len(points)
        what = "the client ended"
    else:
        if kv.get("session_ended") != "1":
            problems.append(f"the server's session did not end (watched {kv.get('took_s')} s)")
        ends = [l for l in nonempty_lines(read(f"{raw}/{name}.server.err"))
                if re.match(r"fabmeter-engine: session (ended|failed): ", l)]
        if len(ends) != 1:
            problems.append(f"the server should log the session's end in one line, got {ends!r}")
        summary["message"] = ends[0] if ends else ""
        what = "the server's session ended"
    if took is None:
        problems.append(f"no time recorded for the survivor ({kv.get('took_s')!r})")
    elif took >= bound:
        problems.append(f"{what} {took:.2f} s after the fault, bound {bound:.1f} s")
    return problems, summary

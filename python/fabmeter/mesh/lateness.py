"""Why a pair went on later than its round's instant: the step of its engine's start that took the time.

The engine stamps each step before a --start-at run's first point (`start_steps_mono_ns`, its own clock): the run
began (its plan reached the engine), the control connection was up (and the SYNs it needed beyond the first),
the session's handshake was done, the transport connected, the first clock probes done, and both ends met at
the point's barrier (`ready_mono_ns`). A pair that started more than LATE_NS after its instant names the longest
step when the engine was ready only after the instant, else its wake-up.
"""

from __future__ import annotations

from typing import Optional

LATE_NS = 1_000_000             # a pair that went on later than this after its instant says why
# The steps, in order: (name, the stamp that ends it, its words); each begins where the one before ended.
STEPS = (("control_connect", "control_connected", "the control connection's connect"),
         ("handshake", "welcomed", "the session's handshake (the server's session starting)"),
         ("transport_connect", "transport_connected", "the transport's connect"),
         ("clock_probes", "probed", "the first clock probes"),
         ("barrier", None, "the wait for the server's end at the point's barrier"))
LATE_STEPS = ("plan", *(name for name, _, _ in STEPS), "wake_up")


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms" if abs(ns) < 10_000_000_000 else f"{ns / 1e9:.1f} s"


def _int(v) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def late_reason(point: dict) -> tuple[Optional[str], Optional[str]]:
    """(step, reason) for a --start-at run's first point that went on more than LATE_NS after its instant, its
    step one of LATE_STEPS; (None, None) for one on time or one whose engine stamped nothing."""
    late, started, ready = (_int(point.get(k)) for k in ("start_late_ns", "started_mono_ns", "ready_mono_ns"))
    if late is None or started is None or late <= LATE_NS:
        return None, None
    instant = started - late
    stamps = point.get("start_steps_mono_ns")
    if ready is None or not isinstance(stamps, dict):
        return None, None
    if ready <= instant:
        return "wake_up", (f"ready {_ms(instant - ready)} before the instant, went on {_ms(late)} after it: "
                           "its wake-up was held off its CPU")
    begun = _int(stamps.get("begun"))
    if begun is not None and begun >= instant:
        return "plan", f"its run began {_ms(begun - instant)} after the instant: the plan reached it late"
    took = []
    start = begun
    for name, stamp, words in STEPS:
        end = ready if stamp is None else _int(stamps.get(stamp))
        if start is not None and end is not None:
            took.append((end - start, name, words))
        start = end
    if not took:
        return None, None
    ns, name, words = max(took)
    reason = f"ready {_ms(ready - instant)} after the instant: {words} took {_ms(ns)}"
    syns = _int(stamps.get("control_syn_retransmits"))
    if name == "control_connect" and syns:
        reason += (f", its SYN sent {syns + 1} times (a SYN or its answer was lost on the way: an ARP request or "
                   "a full queue; the kernel resends a SYN only after 1 s or more)")
    return name, reason

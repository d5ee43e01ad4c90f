"""The cluster load studies' figures from load meshes. Homa's (suites/homa-cluster.toml, many-to-many): per
workload, the slowdown merged over every client against message size, one line per percentile and congestion
control (a colour per control, darker as the offered rate rises). RAMCloud's (suites/ramcloud-cluster.toml,
all-to-one closed loop): the server's transmit path against the clients in all, a line per pool size. Each titled
with the number of hosts and the MTU they ran at."""

from __future__ import annotations

from fabmeter.report.figures import Colors, fig_slowdown, fig_tx_path
from fabmeter.report.files import number, obj
from fabmeter.report.markup import img


def _mtus(doc: dict) -> str:
    """The hosts' interface MTUs as recorded with each one's environment: one value, or the values seen."""
    seen = sorted({h["environment"]["mtu"] for h in doc.get("per_host") or []
                   if isinstance(obj(h.get("environment")).get("mtu"), int)})
    return "/".join(map(str, seen)) or "?"


def _control(params: dict) -> str:
    """The line's name: the transport and the congestion control its sockets were given."""
    return f"{params.get('transport')} {params.get('tcp_cc') or 'kernel default'}"


def section(meshes: list[tuple[str, dict]]) -> list:
    return _slowdown(meshes) + _tx_path(meshes)


def _slowdown(meshes: list[tuple[str, dict]]) -> list:
    """One figure per (workload, hosts, MTU) of the meshes whose pattern split load among every host."""
    groups: dict[tuple, dict[str, list]] = {}
    for _, doc in meshes:
        summary, params = obj(doc.get("mesh")), obj(doc.get("params"))
        overall = obj(obj(doc.get("load")).get("overall"))
        if summary.get("pattern") != "many-to-many" or number(overall.get("offered_rps")) is None:
            continue
        rows = [(b["size_hi"], b["p50"], b["p99"]) for b in overall.get("slowdown") or []
                if number(b.get("size_hi")) and number(b.get("p50")) and number(b.get("p99"))]
        if len(rows) >= 2:
            key = (params.get("workload") or "fixed sizes", len(summary.get("hosts") or []), _mtus(doc))
            groups.setdefault(key, {}).setdefault(_control(params), []).append((overall["offered_rps"], rows))
    figs = []
    for (workload, n, mtu), series in sorted(groups.items()):
        title = f"{workload}, {n} hosts many-to-many, MTU {mtu}"
        figs.append(img(fig_slowdown(title, series, Colors(sorted(series))), f"cluster slowdown {workload} {n}",
                        f"{title}: every client's bucket histograms merged exactly (Homa's figure: slowdown against "
                        "message size, p50 and p99 per congestion control; offered: the clients' sum)", wide=True))
    return figs


def _pools(params: dict) -> str:
    """The line's name: the transport and its pool sizes (those that apply to it)."""
    pools = [f"{k} {params[k]}" for k in ("rq_depth", "sq_depth") if params.get(k) is not None]
    return " ".join([str(params.get("transport")), *pools])


def _tx_point(doc: dict) -> dict | None:
    """A closed-loop all-to-one mesh as one point: the clients in all and the server's transmit path, each
    figure the mean over the pairs whose replies waited for a send buffer (a pair is a session of its own on the
    server); None when none did (or the transport has no send completions): nothing to draw."""
    done = [obj(p.get("load")) for p in doc.get("pairs") or [] if p.get("status") == "ok"]
    pairs = [p for p in done if number(p.get("tx_polls"))]
    clients = obj(doc.get("params")).get("clients")
    clients = clients[0] if isinstance(clients, list) and len(clients) == 1 else clients   # one point, not a sweep
    if not pairs or not isinstance(clients, int):
        return None
    tx = {}
    for k in ("mean_per_poll", "wait_ns_mean", "poll_ns_mean"):
        values = [p[f"tx_{k}"] for p in pairs if number(p.get(f"tx_{k}")) is not None]
        tx[k] = sum(values) / len(values) if values else None
    return {"clients": clients * len(done), "server": {"tx": tx}}


def _tx_path(meshes: list[tuple[str, dict]]) -> list:
    """One figure per (hosts, MTU) of the closed-loop all-to-one meshes: a line per pool size."""
    groups: dict[tuple, dict[str, list]] = {}
    for _, doc in meshes:
        summary = obj(doc.get("mesh"))
        if summary.get("pattern") != "all-to-one" or summary.get("experiment") != "load":
            continue
        if point := _tx_point(doc):
            key = (len(summary.get("hosts") or []), _mtus(doc))
            groups.setdefault(key, {}).setdefault(_pools(obj(doc.get("params"))), []).append(point)
    figs = []
    for (n, mtu), series in sorted(groups.items()):
        series = {label: sorted(points, key=lambda p: p["clients"]) for label, points in series.items()}
        title = f"{n} hosts all-to-one, MTU {mtu}"
        figs.append(img(fig_tx_path(title, series, Colors(sorted(series)), ("clients", "clients in all [log]")),
                        f"cluster transmit path {n}",
                        f"{title}: the server's transmit path, each figure the mean over its sessions (one per client "
                        "host), against the closed-loop clients of every client host together", wide=True))
    return figs

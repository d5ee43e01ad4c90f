"""`fabmeter suite FILE.toml`: a matrix of experiments x transports x options.

A suite file (docs/suites.md) has `[defaults]` and one or more `[[matrix]]`
tables; each table is the cartesian product of its list-valued keys. Keys
are the engine's option keys (`fabmeter-engine options`, e.g. burst_size)
plus `experiment`, `cpus`, `server`, `via_hop` (a forwarding hop to that
server, hop.py: its lat, oneway and stream points are measured through it too), `hop_transport` (the
transport onward from that hop) and `slo`
(latency objectives, slo.py; one string per table, not an axis; a point
that misses them makes the suite exit 4 after every point ran). The whole file is checked against
the option table before anything runs; a mistake is reported with the key
and its line (exit 2).

Every point runs exactly as `fabmeter EXP ... --out OUT/<point-id>` would
(recorded.run_recorded; a mesh point as `fabmeter mesh`, mesh/command.py, in
this process; a peer point, `tool = ...`, as one case of `fabmeter peers`, peer.py) and OUT/index.json lists the points with their status. A point whose run.json says "ok" and whose recorded params (what
the engine ran with) are the point's options over the engine's defaults is finished:
running the suite again skips it, so an interrupted suite resumes where it
stopped. Points on a transport or experiment this engine was built without
are skipped with one line each, not treated as errors.

read.py reads and checks the file and expands its points, ids.py names
them, runner.py runs them, peer.py checks and runs the peer points.
"""

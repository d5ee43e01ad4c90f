"""`fabmeter watch`: a mesh (or a list of pairs) over standing `fabmeter serve`s,
run every --interval, its figures kept as aggregates and published as
OpenMetrics (an HTTP endpoint, a node_exporter textfile).

loop.py: the sweeps (rounds of relayed pairs, as `mesh --launch serve` runs
them), the hosts' check, signals; metrics.py: the per-pair aggregates and the
metric families (prometheus_client); hdr.py: the engine's HdrHistogram
encoding, read into the pair's fixed buckets.
"""

"""`fabmeter report RESULTS_DIR`: one self-contained HTML file of plots and tables.

Walks RESULTS_DIR for run.json (fabmeter runs, suites, the demo) and
peers.json (other tools' results) and writes one HTML file that opens
offline: the plots are matplotlib PNGs embedded as base64, the style sheet
is inline, nothing is fetched. Sections: environment, a comparison table of
every measured point, latency histograms (one per run), CDF overlays,
latency vs message size, bandwidth and message rate vs size, for the
stream experiment latency vs rate with missed steps and a rate x values
heatmap, and for load latency and achieved rate against offered load,
slowdown against size per workload and the server's completions per poll.

Every axis says what it shows: one-way latency measured directly, or
RTT/2 from a ping-pong (never mixed in one plot), which percentile, units.

model.py reads the results, figures.py draws, html.py builds the page.
"""

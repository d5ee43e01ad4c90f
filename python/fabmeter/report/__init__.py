"""`fabmeter report RESULTS_DIR`: one self-contained HTML file of plots and tables.

Walks RESULTS_DIR for run.json (fabmeter runs, suites, the demo),
peers.json (other tools' results), bench.json and mesh.json, and writes one
HTML file that opens offline: the plots are matplotlib PNGs embedded as
base64, the style sheet and the table's sort script are inline, nothing is
fetched. The page opens on the answer: the machine in one line (with a
warning when it, not the transport, sets the figures), a summary figure (a
bench's ratios first, a mesh's heatmaps next), the comparison table
sortable by any column; then the environment and the detail: histograms
folded per experiment, CDF overlays, latency vs message size, bandwidth,
stream, load.

Every axis says what it shows: one-way latency measured directly, or
RTT/2 from a ping-pong (never mixed in one plot), which percentile, units.

files.py reads files without trusting them, model.py reads the results,
summary.py and context.py pick what the top of the page says, figures.py
draws, table.py and html.py build the page through markup.py, which
escapes everything it did not build.
"""

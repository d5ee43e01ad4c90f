"""`fabmeter doctor`: what on this node (and the other end) would make a figure wrong or slow, each finding with
the evidence it read, its expected effect and the command that fixes it. One module per group of checks; the
facts come from the readers that already record them in run.json (envinfo.py, the engine's fabric block)."""

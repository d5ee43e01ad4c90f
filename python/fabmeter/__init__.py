"""fabmeter: orchestration, analysis and reports around the C++ engine.

Nothing in this package is on the data path: it starts `fabmeter-engine`
processes, reads their JSON lines and writes results folders.
"""

__version__ = "0.1.0"

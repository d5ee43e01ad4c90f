"""Checks of what rdma/test-rdma-guest.sh left in OUTDIR/raw, a module per kind
of case; rdma/test_rdma_report.py runs them and prints the tables."""

"""`fabmeter mesh`: one experiment (oneway, lat, bw, stream or load) between every chosen pair of N hosts.

patterns.py: which directed pairs, in which rounds; rendezvous.py: the
authenticated coordination channel between ranks; run.py: what each rank
does (rank 0 coordinates); output.py: the pair objects, summary and matrix.
"""

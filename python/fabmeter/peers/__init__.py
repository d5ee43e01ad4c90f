"""Adapters that run other benchmark tools and read their output into
fabmeter's schema, so their figures sit beside fabmeter's own."""

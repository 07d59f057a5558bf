"""Benchmarks: ``make bench`` prints the figures the issues' performance targets are checked against."""

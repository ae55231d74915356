"""Benchmarks: ``python -m ops.bench NAME [--json FILE] ...``.

Each module here defines ``main(argv) -> int``; speed and memory targets live
here, never in timed tests.
"""

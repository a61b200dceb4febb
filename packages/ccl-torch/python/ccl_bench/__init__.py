"""ccl-bench: collective timings of the ccl backend, gloo and raw ccl-core side by side (see cli.py)."""

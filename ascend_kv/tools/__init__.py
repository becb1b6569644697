"""The command line (``ascend-kv``) and what it runs: the demo, the benchmark, and the plain reference both compare against."""

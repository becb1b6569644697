"""Run the benchmark from a checkout: ``python scripts/bench.py [options]`` = ``ascend-kv bench [options]``.

See ``python scripts/bench.py --help``; docs/benchmarks.md has the numbers and the exact command.
"""

import sys

from ascend_kv.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))

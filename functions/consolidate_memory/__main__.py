"""`python -m functions.consolidate_memory`: consume the durable `consolidate-memory`;
`--sweep`: the nightly consolidation sweep (the CronJob's command)."""

import sys

from functions.consolidate_memory.main import main

if __name__ == "__main__":
    sys.exit(main())

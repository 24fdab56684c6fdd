"""`python -m functions.retention_cron`: one retention run (the CronJob's command)."""

import sys

from functions.retention_cron.main import main

if __name__ == "__main__":
    sys.exit(main())

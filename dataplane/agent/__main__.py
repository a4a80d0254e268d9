"""`python -m dataplane.agent LAB --ready-fd N`: the lab's agent (see dataplane.agent.server)."""
import sys
import time

STARTED = time.monotonic()   # before the imports, which are a phase of bring-up too

from dataplane.agent.server import main  # noqa: E402

sys.exit(main(started=STARTED))

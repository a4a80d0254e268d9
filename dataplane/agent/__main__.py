"""`python -m dataplane.agent LAB --ready-fd N`: the lab's agent (see dataplane.agent.server)."""
import sys

from dataplane.agent.server import main

sys.exit(main())

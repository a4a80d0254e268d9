"""Benchmarks behind `railab bench`, one module per subcommand: deploy, traffic (one
sender), fabric (forwarding rate), queue (virtual vs real queue), ui (the web view)."""

"""Fixtures for the unit tests that need no privileges."""
from __future__ import annotations

import pytest


@pytest.fixture
def railab_cli(monkeypatch, capsys):
    """Run `railab ARGS...` in-process with only the topo verb loaded: (status, stdout, stderr).

    Only `topo` is registered so these tests do not depend on the other verbs' imports;
    the error handling is the real main()'s.
    """
    import dataplane.cli.main as cli_main

    monkeypatch.setattr(cli_main, "VERB_MODULES", ("topo",))

    def run(*argv: str) -> tuple[int, str, str]:
        status = cli_main.main([str(a) for a in argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run

"""Run the `rabit` CLI in-process from a test: a JSON result, or a refusal (exit 2, one line on stderr)."""

import json

import pytest

from cli.main import main


def run(capsys, *argv: str) -> dict:
    """The JSON that ``rabit ARGV`` prints, asserting exit code 0."""
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def fails(capsys, *argv: str) -> str:
    """The one stderr line of ``rabit ARGV``, asserting it exits 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err

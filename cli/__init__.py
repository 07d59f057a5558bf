"""The ``rabit`` command line: the same ``core`` as the dashboard, JSON on ``--json``."""

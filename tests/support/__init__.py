"""What tests share: builders, stand-ins and helpers that more than one test module uses.

A test module imports these (and tests/processes.py, tests/environments.py, tests/conftest.py's constants), never
another test module: a test file can then move, or change its own cases, without breaking another's (issue 40)."""

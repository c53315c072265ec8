"""Markers by what a test uses, for the two tiers (docs/testing.md): `make check` leaves out what starts node
processes, a Spark session or needs root, the long simulator sweeps and the fuzzers, but for the smoke tests;
`make test` runs everything. Set here, from where a test lives and the fixtures it takes, so a new test is
placed without anyone remembering to mark it."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
# Files under tests/server that start no process (pure cores and records, or a node in this process).
IN_PROCESS = {"test_controller_state.py", "test_group_vote.py", "test_group_idle_ticks.py", "test_loop_turn.py",
              "test_server_core_errors.py"}
# Files at the top that start processes (benchmark scripts, deployment examples, a node with secrets).
PROCESSES = {"test_benchmarks_smoke.py", "test_deploy_examples.py", "test_single_bench.py", "test_secrets_at_rest.py"}
ROOT_FIXTURES = {"netns_cluster", "network"}
HEAVY = {"test_server_chaos.py", "test_benchmarks_smoke.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        where = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
        top = where[0] if len(where) > 1 else ""
        if top == "spark":
            item.add_marker(pytest.mark.spark)
        if (top in ("server", "spark") and path.name not in IN_PROCESS) or path.name in PROCESSES:
            item.add_marker(pytest.mark.cluster)
        if ROOT_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.root)
        if path.name == "test_fuzz.py":
            item.add_marker(pytest.mark.fuzz)
        # `make test-parallel` runs two workers (pytest-xdist, --dist loadgroup). The heaviest keep to one worker,
        # one after another: the Spark tests (one JVM session per worker), the chaos runs and the benchmarks'
        # smoke runs, which each load both cores. So do the namespace tests, which pick free subnets.
        if top == "spark" or path.name in HEAVY:
            item.add_marker(pytest.mark.xdist_group("heavy"))
        elif ROOT_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("netns"))

"""The per-server weight-sync state machine: legal path, illegal events, failure recovery."""

from __future__ import annotations

import pytest

from domain.sync_protocol import IllegalTransition, Recovery, ServerState, ServerSync, SyncFailure, SyncStep

URL = "http://gen:8000"


def failure(step: SyncStep, server: str = URL) -> SyncFailure:
    return SyncFailure(server, step, 1, 0.5, "boom")


def serving(version: int | None = 3) -> ServerSync:
    machine = ServerSync(URL)
    machine.connected(version)
    machine.begin(1)
    return machine


def updating() -> ServerSync:
    machine = serving()
    machine.paused()
    machine.starting()
    return machine


def test_a_whole_sync_moves_the_version_only_when_confirmed():
    machine = updating()
    machine.chunk_loaded()
    machine.chunk_loaded()
    machine.finished(4)
    assert machine.version == 3 and machine.state is ServerState.FINISHED
    machine.confirm_version(4)
    machine.prefix_cache_reset()
    machine.resumed()
    assert (machine.state, machine.version, machine.chunks, machine.cache_reset) == (ServerState.SERVING, 4, 2, True)


def test_a_version_the_server_does_not_report_is_not_recorded():
    machine = updating()
    machine.finished(4)
    with pytest.raises(ValueError, match="reports weight version 7, expected 4"):
        machine.confirm_version(7)
    assert machine.version == 3


def test_resume_mid_update_is_illegal():
    with pytest.raises(IllegalTransition, match="resumed in state UPDATING"):
        updating().resumed()


@pytest.mark.parametrize(
    ("event", "args"),
    [("chunk_loaded", ()), ("finished", (1,)), ("starting", ()), ("prefix_cache_reset", ()), ("confirm_version", (1,))],
)
def test_session_events_are_illegal_while_serving(event, args):
    with pytest.raises(IllegalTransition, match=URL):
        getattr(serving(), event)(*args)


def test_a_sync_needs_a_connected_server_and_a_new_number():
    with pytest.raises(IllegalTransition, match="UNCONNECTED"):
        ServerSync(URL).begin(1)
    with pytest.raises(IllegalTransition, match="sync 1 after sync 1"):
        serving().begin(1)


@pytest.mark.parametrize(
    ("prepare", "step", "state", "recovery"),
    [
        (lambda m: None, SyncStep.CHECK_VERSION, ServerState.SERVING, Recovery.NONE),
        (lambda m: None, SyncStep.PAUSE, ServerState.FAILED, Recovery.RESUME),
        (lambda m: m.paused(), SyncStep.START, ServerState.DEAD, Recovery.ABANDON),
        (lambda m: (m.paused(), m.starting()), SyncStep.UPDATE, ServerState.DEAD, Recovery.ABANDON),
        (lambda m: (m.paused(), m.starting()), SyncStep.FINISH, ServerState.DEAD, Recovery.ABANDON),
        (lambda m: (m.paused(), m.starting(), m.finished(4)), SyncStep.RESET_PREFIX_CACHE, ServerState.FAILED, Recovery.RESUME),
        (lambda m: (m.paused(), m.starting(), m.finished(4)), SyncStep.RESUME, ServerState.DEAD, Recovery.NONE),
        (lambda m: m.paused(), SyncStep.RESUME, ServerState.DEAD, Recovery.NONE),
    ],
)
def test_failure_recovery_by_state(prepare, step, state, recovery):
    machine = serving()
    prepare(machine)
    assert machine.fail(failure(step)) is recovery
    assert machine.state is state and machine.failure == failure(step)
    assert machine.version == 3


def test_a_failed_server_can_only_resume_and_a_dead_one_only_be_replaced():
    machine = serving()
    machine.fail(failure(SyncStep.PAUSE))
    with pytest.raises(IllegalTransition):
        machine.starting()
    machine.resumed()
    assert machine.state is ServerState.SERVING
    dead = updating()
    dead.fail(failure(SyncStep.UPDATE))
    for event in (dead.resumed, dead.paused, lambda: dead.connected(1), lambda: dead.begin(2)):
        with pytest.raises(IllegalTransition):
            event()
    dead.replaced()
    assert (dead.state, dead.version) == (ServerState.UNCONNECTED, None)
    dead.connected(None)
    assert dead.state is ServerState.SERVING


def test_version_mismatch_disconnects_without_pausing():
    machine = serving()
    assert not machine.version_matches(None)
    machine.version_mismatch(failure(SyncStep.CHECK_VERSION))
    assert machine.state is ServerState.UNCONNECTED and machine.settled


def test_failure_of_another_server_is_refused():
    with pytest.raises(IllegalTransition, match="http://other"):
        serving().fail(failure(SyncStep.PAUSE, server="http://other"))


def test_failure_describes_server_endpoint_sync_and_elapsed():
    text = failure(SyncStep.UPDATE).describe()
    assert URL in text and "POST /update_weights" in text and "sync 1" in text and "0.500s" in text


def test_a_finished_but_unconfirmed_version_is_recorded_when_the_next_check_sees_it():
    machine = updating()
    machine.finished(4)
    machine.fail(failure(SyncStep.CONFIRM_VERSION))
    machine.resumed()
    assert (machine.version, machine.pending_version) == (3, 4)
    machine.begin(2)
    assert machine.version_matches(4)
    assert (machine.version, machine.pending_version) == (4, None)

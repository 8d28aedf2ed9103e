"""The table from broker answers to exceptions, including codes the test broker
cannot produce on demand (401/403 from API keys, a proxy's HTML 502)."""

from __future__ import annotations

import pytest

from lockbroker import (
    AuthError,
    BrokerUnavailable,
    InvalidRequest,
    LeaseLost,
    LimitConflict,
    LockBrokerError,
    LockBusy,
    MaxHoldExceeded,
    SessionFull,
    SessionLost,
)
from lockbroker.errors import error_from_response


def body(code, **extra):
    return {"error": {"code": code, "message": f"{code} happened", **extra}}


@pytest.mark.parametrize(
    "status, code, expected",
    [
        (400, "invalid_request", InvalidRequest),
        (401, "unauthorized", AuthError),
        (403, "forbidden", AuthError),
        (404, "not_found", InvalidRequest),
        (405, "method_not_allowed", InvalidRequest),
        (409, "lease_lost", LeaseLost),
        (409, "max_hold_exceeded", MaxHoldExceeded),
        (409, "limit_conflict", LimitConflict),
        (409, "session_lost", SessionLost),
        (409, "session_full", SessionFull),
        (413, "payload_too_large", InvalidRequest),
        (423, "lock_busy", LockBusy),
        (408, "request_timeout", BrokerUnavailable),
        (429, "too_many_waiters", BrokerUnavailable),
        (429, "rate_limited", BrokerUnavailable),
        (503, "overloaded", BrokerUnavailable),
        (503, "backend_unavailable", BrokerUnavailable),
        (503, "shutting_down", BrokerUnavailable),
        (500, "internal", BrokerUnavailable),
    ],
)
def test_each_code_maps_to_its_exception(status, code, expected):
    error = error_from_response(status, body(code), "1")
    assert type(error) is expected and isinstance(error, LockBrokerError)
    assert (error.status, error.code, error.retry_after) == (status, code, 1.0)
    assert error.message == f"{code} happened" and code in str(error)


def test_lock_busy_carries_the_holder():
    error = error_from_response(
        423,
        body("lock_busy", owner="web-1", fence=7, expires_in_ms=1500, available_in_ms=2500),
        "3",
    )
    assert isinstance(error, LockBusy)
    assert (error.owner, error.fence, error.expires_in, error.available_in) == ("web-1", 7, 1.5, 2.5)
    assert error.holders == () and error.limit is None  # a broker that lists no holders


def test_lock_busy_lists_every_holder_and_a_semaphores_limit():
    holders = [
        {"owner": "worker-1", "fence": 7, "mode": "permit",
         "expires_in_ms": 1500, "available_in_ms": 1500},
        {"owner": None, "fence": 9, "mode": "permit",
         "expires_in_ms": 4000, "available_in_ms": 4500},
    ]
    error = error_from_response(
        423,
        body("lock_busy", owner="worker-1", fence=7, expires_in_ms=1500,
             available_in_ms=1500, holders=holders, limit=2),
    )
    assert isinstance(error, LockBusy) and error.limit == 2
    assert [(h.owner, h.fence, h.mode, h.expires_in, h.available_in) for h in error.holders] == [
        ("worker-1", 7, "permit", 1.5, 1.5),
        (None, 9, "permit", 4.0, 4.5),
    ]


def test_limit_conflict_carries_the_limit_in_force():
    error = error_from_response(
        409,
        body("limit_conflict", limit=3),
    )
    assert type(error) is LimitConflict and error.limit == 3 and error.status == 409


def test_a_body_without_the_error_shape_maps_by_status():
    assert type(error_from_response(502, None)) is BrokerUnavailable
    assert type(error_from_response(401, None)) is AuthError
    assert type(error_from_response(418, "teapot")) is LockBrokerError
    assert error_from_response(503, None, "Wed, 21 Oct 2015 07:28:00 GMT").retry_after is None

"""Connector accounts' circuits, for operators (``GET /v1/ops/circuits``, ``payorch
status``, the console's overview, decision 0082).  A read: every circuit that has a row (an
account whose provider failed at least once) and every account with payments waiting out
its circuit; an account in neither has a closed circuit that never counted a failure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.circuit import Circuit, CircuitState
from orchestrator.domain.encoding import iso


@dataclass(frozen=True)
class CircuitView:
    circuit: Circuit
    # Payments waiting for this circuit (no lease, no message: the sweeper releases them).
    waiting: int

    @property
    def closed(self) -> bool:
        return self.circuit.state is CircuitState.CLOSED


def read_circuits(uow: UnitOfWork) -> tuple[CircuitView, ...]:
    """In the caller's (read-only) unit of work."""
    waiting = uow.circuits.waiting_counts()
    views = [CircuitView(c, waiting.pop(c.key, 0)) for c in uow.circuits.all()]
    views += [CircuitView(Circuit(key=key), count) for key, count in waiting.items()]
    return tuple(sorted(views, key=lambda view: view.circuit.key))


def circuit_document(view: CircuitView) -> dict[str, Any]:
    """``{"id": "ca_…", "circuit": {...}}``: design.md Part 3's ``connectors[]`` entry."""
    circuit = view.circuit
    return {
        "id": circuit.key,
        "circuit": {
            "state": circuit.state.value,
            "since": iso(circuit.since) if circuit.since else None,
            "failures": circuit.failures,
            "opened_at": iso(circuit.opened_at) if circuit.opened_at else None,
            "next_probe_at": (
                iso(circuit.next_probe_at)
                if circuit.next_probe_at and circuit.state is not CircuitState.CLOSED
                else None
            ),
            "waiting_payments": view.waiting,
        },
    }

"""Every metric payorch defines is exported by some process role: a series that no
``/metrics`` serves is one that no alert can ever see."""

from __future__ import annotations

from prometheus_client import REGISTRY

from orchestrator import metrics


def _defined() -> set[str]:
    names = set().union(*metrics.SAMPLED_SERIES.values())
    for family in REGISTRY.collect():
        if family.name.startswith("payorch_"):
            suffix = "_total" if family.type == "counter" else ""
            names.add(family.name + suffix)
    return names


def test_every_defined_series_is_exported_by_a_role() -> None:
    exported = set().union(*metrics.ROLE_SERIES.values(), *metrics.SAMPLED_SERIES.values())
    assert _defined() - exported == set()


def test_the_role_series_name_only_defined_metrics() -> None:
    exported = set().union(*metrics.ROLE_SERIES.values(), *metrics.SAMPLED_SERIES.values())
    assert exported - _defined() == set()

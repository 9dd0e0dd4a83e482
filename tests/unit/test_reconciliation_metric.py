"""``payorch_reconciliation_findings{kind}``: open findings by kind, sampled at scrape by
the API's metrics server, every kind present from the start."""

from __future__ import annotations

from orchestrator import metrics
from orchestrator.domain.reconciliation import FindingKind


def test_the_gauge_reports_every_kind_and_the_sampled_open_findings() -> None:
    gauges = metrics.DatabaseGauges(
        lambda: metrics.DatabaseSample(
            records={}, oldest_processing_age=0.0, findings={"orphan_at_provider": 2}
        )
    )

    (family,) = [f for f in gauges.collect() if f.name == metrics.RECONCILIATION_FINDINGS_SERIES]

    values = {s.labels["kind"]: s.value for s in family.samples}
    assert values == {
        kind.value: (2 if kind.value == "orphan_at_provider" else 0) for kind in FindingKind
    }


def test_the_api_role_exports_the_series() -> None:
    assert metrics.RECONCILIATION_FINDINGS_SERIES in metrics.SAMPLED_SERIES["api"]
    assert set(metrics.FINDING_KINDS) == {kind.value for kind in FindingKind}

"""The generated documentation pages say what the code says.

``docs/reference/configuration.md`` comes from the settings class and the CLI's options,
``docs/api/openapi.json`` from the app; a change to either without ``python -m
devtools.reference_docs`` (or ``make docs``) fails here, so the docs cannot drift."""

from __future__ import annotations

import pytest

from devtools import reference_docs
from orchestrator.settings import Settings


def test_the_configuration_page_is_the_settings_class() -> None:
    committed = reference_docs.CONFIGURATION_PAGE.read_text(encoding="utf-8")
    assert committed == reference_docs.configuration_page(), (
        "docs/reference/configuration.md is out of date: run python -m devtools.reference_docs"
    )


def test_every_setting_is_on_the_configuration_page_with_its_description() -> None:
    page = reference_docs.CONFIGURATION_PAGE.read_text(encoding="utf-8")
    sections = page.split("\n### ")
    for name, field in Settings.model_fields.items():
        heading = f"`PAYORCH_{name.upper()}`\n"
        section = next((part for part in sections if part.startswith(heading)), None)
        assert section is not None, f"PAYORCH_{name.upper()} is missing from the page"
        assert field.description is not None
        assert " ".join(field.description.split()) in section


def test_a_setting_shows_its_type_and_default_as_a_reader_says_them() -> None:
    page = reference_docs.configuration_page()
    assert "### `PAYORCH_ENV`\n\n`dev` | `test` | `production` · default none: required\n" in page
    assert "### `PAYORCH_STRIPE_WEBHOOK_SECRET`\n\nsecret or unset · default unset\n" in page
    assert "### `PAYORCH_SECRET_KEY`\n\nsecret · default a dev placeholder\n" in page


def test_a_cli_option_read_from_the_environment_is_on_the_page() -> None:
    page = reference_docs.configuration_page()
    assert "| `PAYORCH_OPERATOR` | `payorch leases takeover` | `--operator` |" in page
    assert "| `PAYORCH_SIM_WEBHOOK_SECRET` | `payorch provider-sim` |" in page


def test_a_setting_without_a_description_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    field = Settings.model_fields["log_level"]
    monkeypatch.setattr(field, "description", None)
    with pytest.raises(ValueError, match=r"Settings\.log_level has no description"):
        reference_docs.configuration_page()


def test_the_openapi_document_in_the_docs_is_the_apps() -> None:
    committed = reference_docs.OPENAPI_DOCUMENT.read_text(encoding="utf-8")
    assert committed == reference_docs.openapi_document(), (
        "docs/api/openapi.json is out of date: run python -m devtools.reference_docs"
    )


def test_check_mode_reports_a_stale_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration\n\nold\n", encoding="utf-8")
    monkeypatch.setattr(reference_docs, "ROOT", tmp_path)
    monkeypatch.setattr(
        reference_docs, "generated_pages", lambda: {stale: "# Configuration\n\nnew\n"}
    )
    assert reference_docs.main(["--check"]) == 1
    assert "configuration.md" in capsys.readouterr().err
    assert stale.read_text(encoding="utf-8") == "# Configuration\n\nold\n"
    assert reference_docs.main([]) == 0
    assert stale.read_text(encoding="utf-8") == "# Configuration\n\nnew\n"

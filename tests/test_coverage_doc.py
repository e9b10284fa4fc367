"""docs/COVERAGE.md is generated from the registry and must be current."""

from pathlib import Path

from converter.lowering.coverage import render


def test_coverage_doc_is_generated_and_current():
    doc = Path(__file__).resolve().parents[1] / "docs" / "COVERAGE.md"
    assert doc.read_text() == render(), "regenerate: python -m converter.lowering.coverage > docs/COVERAGE.md"

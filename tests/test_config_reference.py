"""docs/configuration.md's reference is generated from app/config.py's Field descriptions, and kept in step."""

from __future__ import annotations

from app.config import Settings
from app.tools import config_reference


def test_the_configuration_reference_is_in_step_with_the_code():
    [block] = config_reference.BLOCK.findall(config_reference.DOC.read_text())
    assert block[1] == config_reference.table(), "run: python -m app.tools.config_reference --write"


def test_every_setting_is_described():
    keys = [key for key, _, _ in config_reference.rows(Settings)]
    assert {"engine", "vlm.max_pixels", "limits.pdf_dpi", "jobs.store", "ocr_autoscaling.policy"} <= set(keys)
    undescribed = [key for key, _, description in config_reference.rows(Settings) if not description.strip()]
    assert undescribed == []


def test_a_setting_added_without_regenerating_is_found(monkeypatch):
    from pydantic import Field, create_model

    grown = create_model("Grown", __base__=Settings, new_knob=(int, Field(3, description="A new knob.")))
    monkeypatch.setattr(config_reference, "Settings", grown)
    [block] = config_reference.BLOCK.findall(config_reference.DOC.read_text())
    assert block[1] != config_reference.table() and "`new_knob`" in config_reference.table()

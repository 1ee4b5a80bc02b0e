"""Settings are declared once; the README's table is generated from the declaration."""

from pathlib import Path

import pytest
from torch_neuronx import settings


def test_readme_table_is_generated_from_declarations():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert settings.markdown_table() in readme, "regenerate with: python -m torch_neuronx.settings"


@pytest.mark.parametrize("raw,value", [("1", True), ("true", True), ("0", False), ("off", False)])
def test_boolean_values(raw, value):
    assert settings.get("NEURON_LAUNCH_BLOCKING", {"NEURON_LAUNCH_BLOCKING": raw}) is value


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="NEURON_LAUNCH_BLOCKING='maybe' is not a boolean"):
        settings.get("NEURON_LAUNCH_BLOCKING", {"NEURON_LAUNCH_BLOCKING": "maybe"})

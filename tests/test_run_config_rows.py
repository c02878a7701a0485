"""The report's "Run configuration": what is called changed from the defaults."""

from __future__ import annotations

from bench.config.parameters import defaults_on
from bench.config.run_config import build_config
from bench.report.run_page import _config_rows


def test_only_parameters_set_away_from_their_default_are_called_changed():
    """A default run changes nothing; a parameter that does not apply (LIBRARY_MODE without a library: n/a)
    is not a change; a set one is, with its default beside it."""
    defaults = defaults_on("postgres")
    plain = build_config().public()
    assert plain["library_mode"] == "n/a" and defaults["library_mode"] == "worker"
    assert _config_rows(plain, defaults)["changed_rows"] == []
    set_ = build_config(overrides={"workers": 7}).public()
    assert _config_rows(set_, defaults)["changed_rows"] == [("workers", "7", str(defaults["workers"]))]

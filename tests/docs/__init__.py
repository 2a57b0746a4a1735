"""Tests that keep the docs honest: their worked examples run against the real platform."""

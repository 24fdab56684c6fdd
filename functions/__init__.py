"""Thin entry points, one folder per function (R-2)."""

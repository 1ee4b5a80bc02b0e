"""Low-precision formats and rounding (formats.py, rounding.py)."""

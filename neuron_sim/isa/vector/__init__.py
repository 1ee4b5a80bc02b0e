"""VectorE instructions, one module each (NKI ISA names)."""

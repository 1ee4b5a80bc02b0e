"""On-chip memory allocation (SBUF, PSUM)."""

"""ScalarE instructions: activation (and activation_reduce)."""

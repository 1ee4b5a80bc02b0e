"""TensorE instructions: nc_matmul (LoadStationary + MultiplyMoving), nc_matmul_mx, nc_transpose."""

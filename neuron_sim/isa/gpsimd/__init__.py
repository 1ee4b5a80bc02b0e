"""GpSimd instructions: iota, affine_select, local_gather, tensor_partition_reduce."""

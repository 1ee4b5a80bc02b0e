"""Ops whose only ATen kernels are CUDA's: the ones a model on 'neuron' reaches have neuron
kernels (RNN cells, fused dropout, SyncBatchNorm statistics, out_dtype matmuls, FP8 grouped
GEMM, record_stream), checked against CPU; every other one is listed with the reason it is
never reached from a neuron tensor."""

import copy
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

NATIVE_FUNCTIONS = Path(torch.__file__).parents[1] / "torchgen/packaged/ATen/native/native_functions.yaml"

_CUDNN_MIOPEN = "cuDNN / MIOpen entry point: PyTorch calls it only for CUDA tensors"
_SPARSE_24 = "2:4 semi-structured sparsity (cuSPARSELt / CUTLASS layouts); reached only from CUDA"
_SDPA = "SDPA backend of CUDA; on neuron _fused_sdp_choice picks OVERRIDEABLE (test_openreg_port)"
NOT_REACHED = {
    **{op: _CUDNN_MIOPEN for op in (
        "_use_cudnn_ctc_loss", "_use_cudnn_ctc_loss.Tensor", "_cudnn_ctc_loss", "_cudnn_ctc_loss.Tensor",
        "_cudnn_rnn_flatten_weight", "_cudnn_rnn", "_cudnn_rnn_backward", "_cudnn_init_dropout_state",
        "cudnn_affine_grid_generator", "cudnn_affine_grid_generator_backward", "cudnn_batch_norm",
        "cudnn_batch_norm.out", "cudnn_batch_norm_backward", "cudnn_convolution",
        "cudnn_convolution.out", "cudnn_convolution_transpose", "cudnn_convolution_relu",
        "cudnn_convolution_add_relu", "cudnn_grid_sampler", "cudnn_grid_sampler_backward",
        "miopen_batch_norm", "miopen_batch_norm_backward", "miopen_convolution",
        "miopen_convolution_transpose", "miopen_depthwise_convolution", "miopen_convolution_relu",
        "miopen_convolution_add_relu", "miopen_rnn", "miopen_rnn_backward", "_use_miopen_ctc_loss",
        "_use_miopen_ctc_loss.Tensor", "miopen_ctc_loss", "miopen_ctc_loss.Tensor")},
    **{op: _SPARSE_24 for op in (
        "_cslt_compress", "_cslt_sparse_mm", "_cslt_sparse_mm_search", "_sparse_semi_structured_tile",
        "_sparse_semi_structured_apply", "_sparse_semi_structured_apply_dense",
        "_sparse_semi_structured_linear", "_sparse_semi_structured_mm",
        "_sparse_semi_structured_addmm", "_to_sparse_semi_structured")},
    **{op: _SDPA for op in (
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention.quantized",
        "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward", "_flash_attention_forward",
        "_flash_attention_forward_no_dropout_inplace", "_flash_attention_forward.quantized",
        "_flash_attention_backward", "_efficient_attention_forward", "_efficient_attention_backward",
        "_cudnn_attention_forward", "_cudnn_attention_backward", "_fill_mem_eff_dropout_mask_",
        "_triton_scaled_dot_attention", "_triton_multi_head_attention")},
    "_mixed_dtypes_linear": "CUTLASS mixed-dtype GEMM, called only by CUDA quantization paths",
    "_convert_weight_to_int4pack": "tinygemm's CUDA int4 layout (CPU has its own _for_cpu ops)",
    "_weight_int4pack_mm": "tinygemm's CUDA int4 layout (CPU has its own _for_cpu ops)",
    "_philox_key_split": "CUDA's functional Philox RNG (torch.func on CUDA only)",
    "_philox_key_fold_in": "CUDA's functional Philox RNG (torch.func on CUDA only)",
    "_philox_normal_": "CUDA's functional Philox RNG (torch.func on CUDA only)",
    "_philox_uniform_": "CUDA's functional Philox RNG (torch.func on CUDA only)",
    "_conv_depthwise2d": "_convolution's CUDA branch; neuron convolutions use convolution_overrideable",
    "_conv_depthwise2d.out": "_convolution's CUDA branch; neuron convolutions use convolution_overrideable",
    "conv_depthwise3d": "_convolution's CUDA branch; neuron convolutions use convolution_overrideable",
    "_fused_rms_norm_backward": "F.rms_norm on neuron takes the composite path (test below)",
}


def _cuda_only_ops():
    import yaml
    ops = []
    for fn in yaml.load(NATIVE_FUNCTIONS.read_text(), Loader=yaml.CSafeLoader):
        keys = {k.strip() for key in (fn.get("dispatch") or {}) for k in key.split(",")}
        if "CUDA" in keys and "CPU" not in keys and not any("Composite" in k for k in keys):
            ops.append(re.match(r"[\w.]+", fn["func"]).group(0))
    return ops


def test_every_cuda_only_op_has_a_neuron_kernel_or_a_reason():
    ops = _cuda_only_ops()
    assert len(ops) > 80          # the registrations were read
    missing = [op for op in ops if op not in NOT_REACHED and
               not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "PrivateUse1")]
    assert missing == []
    assert not [op for op in NOT_REACHED if op not in ops]    # the list has no stale entries


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layers,bidirectional,batch_first,bias",
                         [(1, False, False, True), (2, True, True, True), (2, False, True, False)])
def test_recurrent_layers_train_equal_to_cpu(kind, layers, bidirectional, batch_first, bias):
    torch.manual_seed(0)
    cpu = getattr(torch.nn, kind)(6, 5, num_layers=layers, bidirectional=bidirectional,
                                  batch_first=batch_first, bias=bias)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(3, 4, 6)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, dev)]
    for _ in range(3):
        losses = []
        for model, opt, inp in ((cpu, opts[0], x), (dev, opts[1], x.to("neuron"))):
            out, _ = model(inp)
            loss = out.square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-5, atol=1e-6, msg=name)


def test_cells_with_state_and_no_grad_for_one_output():
    torch.manual_seed(1)
    for cell in (torch.nn.LSTMCell(4, 3), torch.nn.GRUCell(4, 3)):
        x, h = torch.randn(2, 4), torch.randn(2, 3)
        state = (h, torch.randn(2, 3)) if isinstance(cell, torch.nn.LSTMCell) else h
        ref = cell(x, state)
        dcell = copy.deepcopy(cell).to("neuron")
        dstate = tuple(s.to("neuron") for s in state) if isinstance(state, tuple) else state.to("neuron")
        got = dcell(x.to("neuron"), dstate)
        ref_h, got_h = (ref[0], got[0]) if isinstance(ref, tuple) else (ref, got)
        torch.testing.assert_close(got_h.cpu(), ref_h, rtol=1e-5, atol=1e-6)
        ref_h.sum().backward()          # only h: the cell's backward gets no grad for c
        got_h.sum().backward()
        for p, q in zip(cell.parameters(), dcell.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)


def test_rms_norm_backward_stays_composite():
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    xd, wd = (t.detach().to("neuron").requires_grad_() for t in (x, w))
    F.rms_norm(x, (8,), w).square().sum().backward()
    F.rms_norm(xd, (8,), wd).square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)


def test_matmuls_with_out_dtype():
    a, b = torch.randn(2, 3, 4).bfloat16(), torch.randn(2, 4, 5).bfloat16()
    c = torch.randn(2, 3, 5)
    n = lambda t: t.to("neuron")  # noqa: E731
    want = a.float() @ b.float()
    torch.testing.assert_close(torch.bmm(n(a), n(b), out_dtype=torch.float32).cpu(), want)
    torch.testing.assert_close(torch.mm(n(a[0]), n(b[0]), out_dtype=torch.float32).cpu(), want[0])
    torch.testing.assert_close(
        torch.baddbmm(n(c), n(a), n(b), out_dtype=torch.float32, beta=0.5).cpu(), 0.5 * c + want)
    torch.testing.assert_close(
        torch.addmm(n(c[0]), n(a[0]), n(b[0]), out_dtype=torch.float32).cpu(), c[0] + want[0])
    out = torch.empty(0, device="neuron")       # the .dtype_out kernels
    torch.testing.assert_close(torch.addmm(n(c[0]), n(a[0]), n(b[0]), out_dtype=torch.float32,
                                           out=out).cpu(), c[0] + want[0])
    torch.testing.assert_close(torch.bmm(n(a), n(b), out_dtype=torch.float32, out=out).cpu(), want)
    with pytest.raises(RuntimeError, match="out_dtype must be the input dtype"):
        torch.mm(n(a[0]), n(b[0]), out_dtype=torch.float16)


def test_fused_dropout_and_masked_scale():
    g = torch.Generator(device="neuron").manual_seed(4)
    x = torch.randn(1000, device="neuron")
    out, mask = torch._fused_dropout(x, 0.8, g)
    assert mask.dtype == torch.uint8 and 700 < int(mask.sum()) < 900
    torch.testing.assert_close(out.cpu(), (x * mask / 0.8).cpu())
    torch.testing.assert_close(torch._masked_scale(x, mask, 2.0).cpu(), (x * mask * 2).cpu())
    torch.ones(2, device="neuron").record_stream(torch.neuron.current_stream())


def test_sync_batch_norm_statistics_match_batch_norm():
    # Two "ranks" of SyncBatchNorm: per-shard stats, gathered, then the elementwise passes;
    # forward and input gradient must equal batch_norm over the whole batch on CPU.
    torch.manual_seed(2)
    x, w, b = torch.randn(6, 3, 5), torch.randn(3), torch.randn(3)
    grad = torch.randn(6, 3, 5)
    xc = x.clone().requires_grad_()
    rm, rv = torch.zeros(3), torch.ones(3)
    ref = F.batch_norm(xc, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
    ref.backward(grad)
    n = lambda t: t.to("neuron")  # noqa: E731
    shards = [n(x[:2]), n(x[2:])]
    stats = [torch.batch_norm_stats(s, 1e-5) for s in shards]
    mean, invstd = (torch.stack([s[i] for s in stats]) for i in (0, 1))
    counts = torch.tensor([2 * 5, 4 * 5], dtype=torch.float32, device="neuron")
    rmd, rvd = n(torch.zeros(3)), n(torch.ones(3))
    mean_all, invstd_all = torch.batch_norm_gather_stats_with_counts(
        n(x), mean, invstd, rmd, rvd, 0.1, 1e-5, counts)
    out = torch.cat([torch.batch_norm_elemt(s, n(w), n(b), mean_all, invstd_all, 1e-5) for s in shards])
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rmd.cpu(), rm)
    torch.testing.assert_close(rvd.cpu(), rv)
    reduced = [torch.batch_norm_backward_reduce(n(grad[sl]), s, mean_all, invstd_all, n(w),
                                                True, True, True)
               for sl, s in ((slice(0, 2), shards[0]), (slice(2, 6), shards[1]))]
    sum_dy = reduced[0][0] + reduced[1][0]
    sum_dy_xmu = reduced[0][1] + reduced[1][1]
    gin = torch.cat([torch.batch_norm_backward_elemt(n(grad[sl]), s, mean_all, invstd_all, n(w),
                                                     sum_dy, sum_dy_xmu, counts.int())
                     for sl, s in ((slice(0, 2), shards[0]), (slice(2, 6), shards[1]))])
    torch.testing.assert_close(gin.cpu(), xc.grad, rtol=1e-4, atol=1e-5)


def _fp8(t):
    return t.to(torch.float8_e4m3fn)


def test_scaled_grouped_mm_fp8_moe():
    torch.manual_seed(3)
    G, K, N = 3, 16, 8
    offs = torch.tensor([4, 4, 10], dtype=torch.int32)    # the second expert gets no tokens
    a = _fp8(torch.randn(10, K))
    b = _fp8(torch.randn(G, N, K)).transpose(1, 2)         # (G, K, N), column-major as on CUDA
    sa, sb = torch.rand(10) + 0.5, torch.rand(G, N) + 0.5
    got = torch._scaled_grouped_mm(a.to("neuron"), b.to("neuron"), sa.to("neuron"),
                                   sb.to("neuron"), offs=offs.to("neuron"),
                                   out_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == (10, N)
    want = torch.zeros(10, N)
    for g, (s, e) in enumerate(((0, 4), (4, 4), (4, 10))):
        want[s:e] = (a[s:e].float() * sa[s:e, None]) @ (b[g].float() * sb[g][None, :])
    torch.testing.assert_close(got.cpu().float(), want.bfloat16().float(), rtol=1e-2, atol=1e-2)
    # 3-D x 3-D: one GEMM per expert of equal size.
    a3, sa3 = _fp8(torch.randn(G, 4, K)), torch.rand(G, 4) + 0.5
    got3 = torch._scaled_grouped_mm(a3.to("neuron"), b.to("neuron"), sa3.to("neuron"),
                                    sb.to("neuron"), out_dtype=torch.bfloat16)
    want3 = torch.bmm(a3.float() * sa3[..., None], b.float() * sb[:, None, :])
    torch.testing.assert_close(got3.cpu().float(), want3.bfloat16().float(), rtol=1e-2, atol=1e-2)


def test_scaled_grouped_mm_k_grouped_with_empty_groups():
    # 2-D x 2-D (K grouped, the MoE weight gradient): one [M, N] per group, zeros for a group
    # with no tokens, wherever it is (an empty first group shifted every later one before).
    torch.manual_seed(5)
    M, N = 4, 8
    offs = torch.tensor([0, 16, 16, 32], dtype=torch.int32)
    a, b = _fp8(torch.randn(M, 32)), _fp8(torch.randn(N, 32)).t()
    sa, sb = torch.rand(4 * M) + 0.5, torch.rand(4 * N) + 0.5
    got = torch._scaled_grouped_mm(a.to("neuron"), b.to("neuron"), sa.to("neuron"),
                                   sb.to("neuron"), offs=offs.to("neuron"),
                                   out_dtype=torch.bfloat16)
    want = torch.zeros(4, M, N)
    for g, (s, e) in enumerate(((0, 0), (0, 16), (16, 16), (16, 32))):
        want[g] = (a[:, s:e].float() @ b[s:e].float()) * sa[g * M:(g + 1) * M, None] \
            * sb[None, g * N:(g + 1) * N]
    assert got.shape == (4, M, N)
    torch.testing.assert_close(got.cpu().float(), want.bfloat16().float(), rtol=1e-2, atol=1e-2)


def _e8m0(shape):
    return (2.0 ** torch.randint(-3, 3, shape).float()).to(torch.float8_e8m0fnu)


def _mx_reference(x, scale, k_dim):
    return x.float() * scale.float().repeat_interleave(32, -1).movedim(-1, k_dim)


def _v2(a, b, sa, recipe, sb, offs=None, swizzle=F.SwizzleType.NO_SWIZZLE):
    dev = [t.to("neuron") for t in (a, b, sa, sb)]
    return F.scaled_grouped_mm(dev[0], dev[1], dev[2], recipe, dev[3], recipe, swizzle_a=swizzle,
                               swizzle_b=swizzle,
                               offs=None if offs is None else offs.to("neuron")).cpu().float()


def test_scaled_grouped_mm_v2_mxfp8_and_rowwise():
    torch.manual_seed(4)
    G, K, N = 3, 64, 8
    offs = torch.tensor([4, 4, 10], dtype=torch.int32)    # the second expert gets no tokens
    a, sa = _fp8(torch.randn(10, K)), _e8m0((10, K // 32))
    b, sb = _fp8(torch.randn(G, N, K)).transpose(1, 2), _e8m0((G, N, K // 32))
    af, bf = _mx_reference(a, sa, -1), _mx_reference(b, sb, -2)
    want = torch.zeros(10, N)
    want[0:4], want[4:10] = af[0:4] @ bf[0], af[4:10] @ bf[2]
    got = _v2(a, b, sa, F.ScalingType.BlockWise1x32, sb, offs)
    torch.testing.assert_close(got, want.bfloat16().float(), rtol=0, atol=0)
    # 3-D x 3-D (one GEMM per expert) and 2-D x 2-D (K grouped: the weight gradient).
    a3, sa3 = _fp8(torch.randn(G, 4, K)), _e8m0((G, 4, K // 32))
    want3 = torch.bmm(_mx_reference(a3, sa3, -1), bf)
    torch.testing.assert_close(_v2(a3, b, sa3, F.ScalingType.BlockWise1x32, sb),
                               want3.bfloat16().float(), rtol=0, atol=0)
    kt, sk = _fp8(torch.randn(N, 96)), _e8m0((N, 3))
    x, sx = _fp8(torch.randn(6, 96)), _e8m0((6, 3))
    kofs = torch.tensor([32, 96], dtype=torch.int32)
    xf, kf = _mx_reference(x, sx, -1), _mx_reference(kt.t(), sk, -2)
    want2 = torch.stack([xf[:, :32] @ kf[:32], xf[:, 32:] @ kf[32:]])
    torch.testing.assert_close(_v2(x, kt.t(), sx, F.ScalingType.BlockWise1x32, sk, kofs),
                               want2.bfloat16().float(), rtol=0, atol=0)
    # Row-wise FP8 through v2 is _scaled_grouped_mm.
    ra, rb = torch.rand(10) + 0.5, torch.rand(G, N) + 0.5
    v1 = torch._scaled_grouped_mm(a.to("neuron"), b.to("neuron"), ra.to("neuron"),
                                  rb.to("neuron"), offs=offs.to("neuron"),
                                  out_dtype=torch.bfloat16)
    assert torch.equal(_v2(a, b, ra, F.ScalingType.RowWise, rb, offs), v1.cpu().float())


def test_scaled_grouped_mm_v2_refuses_what_it_cannot_do():
    a, b = _fp8(torch.randn(4, 64)), _fp8(torch.randn(2, 8, 64)).transpose(1, 2)
    sa, sb = _e8m0((4, 2)), _e8m0((2, 8, 2))
    offs = torch.tensor([2, 4], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="swizzled scales .*NO_SWIZZLE"):
        _v2(a, b, sa, F.ScalingType.BlockWise1x32, sb, offs, F.SwizzleType.SWIZZLE_32_4_4)
    with pytest.raises(RuntimeError, match=r"scale of shape \(4, 3\).*expected \(4, 2\)"):
        _v2(a, b, _e8m0((4, 3)), F.ScalingType.BlockWise1x32, sb, offs)
    with pytest.raises(RuntimeError, match=r"recipes \[0\] x \[0\] are not supported"):
        _v2(a, b, torch.ones(()), F.ScalingType.TensorWise, torch.ones(()), offs)

"""backend/torch_neuronx/check_semantics.py: eager ops on the device checked against their
lowered programs run through the ISA semantics (neuron_sim/lower/semantics.py)."""

import textwrap

import pytest

pytest.importorskip("torch")


def test_exact_eager_ops_are_checked_and_agree(py):
    proc = py("""
        import torch, torch_neuronx
        import torch.nn.functional as F
        from torch_neuronx import check_semantics as cs
        checked = []
        check = cs.check_lowered
        cs.check_lowered = lambda op, *a, **k: checked.append(op.name) or check(op, *a, **k)
        x = torch.randn(128, 1001, device="neuron")
        y = torch.randn(128, 1001, device="neuron")
        with cs.checking():
            z = torch.exp(x) + y
            z.mul_(0.5)
            s = z.sum(-1)
            p = torch.softmax(z, -1)
            c = torch.cat([x, y], 1)
            h = F.linear(x, torch.randn(64, 1001, device="neuron"))
            b = (x.bfloat16() * y.bfloat16()).sum(-1)
            w = torch.asin(x)                     # timing-only: not checked
        torch.neuron.synchronize()
        print(sorted(set(checked)))
        """)
    out = proc.stdout
    for name in ("aten::exp", "aten::add.Tensor", "aten::mul_.Tensor", "aten::sum.dim_IntList",
                 "aten::_softmax", "aten::cat", "aten::_to_copy"):
        assert repr(name) in out, (name, out)
    assert "aten::asin" not in out


def test_a_rule_that_computes_something_else_raises_naming_the_op(py):
    proc = py("""
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        from neuron_sim.lower import semantics
        semantics.EXACT["unary_activation"].add("aten::asin")    # it is charged as arctan
        x = torch.randn(128, 1001, device="neuron")
        try:
            with cs.checking():
                torch.asin(x)
        except RuntimeError as e:
            print("RAISED", e)
        """)
    assert "RAISED aten::asin: output 0 of its lowered program" in proc.stdout
    assert "input shapes [(128, 1001)]" in proc.stdout and "by up to" in proc.stdout


def test_the_setting_turns_the_check_on_for_the_process(py):
    code = """
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        from neuron_sim.lower import semantics
        semantics.EXACT["unary_activation"].add("aten::asin")
        print("AT IMPORT", len(cs._installed))        # import torch_neuronx entered it
        print("ON", cs.install_if_set(), len(cs._installed))     # once
        try:
            torch.asin(torch.randn(16, 16, device="neuron"))
        except RuntimeError as e:
            print("RAISED", str(e)[:20])
        """
    on = py(code, env={"NEURON_SIM_CHECK_SEMANTICS": "1"}).stdout
    assert "AT IMPORT 1" in on and "ON True 1" in on and "RAISED aten::asin" in on
    off = py(code).stdout
    assert "AT IMPORT 0" in off and "ON False 0" in off and "RAISED" not in off


# ---- compiled graphs: the graph's one program against the values the graph computes --------

_MLP = """
    import logging, torch, torch_neuronx
    import torch.nn as nn, torch.nn.functional as F
    from torch_neuronx import check_semantics as cs
    logging.basicConfig(format="LOG %(message)s")
    logging.getLogger("torch_neuronx.check_semantics").setLevel(logging.INFO)
    graphs = []
    check = cs.check_lowered_sequence
    cs.check_lowered_sequence = lambda ops, *a, **k: graphs.append(len(ops)) or check(ops, *a, **k)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(96, 128), nn.Linear(128, 96)
            self.ln = nn.LayerNorm(96)

        def forward(self, x):
            h = self.fc2(F.gelu(self.fc1(x), approximate="tanh")) + x
            return torch.softmax(self.ln(h), -1)
    model = torch.compile(MLP().to("neuron"), backend="neuron")
    x = torch.randn(128, 96, device="neuron")
    """


def _mlp(code: str) -> str:
    """A compiled MLP (linear -> gelu -> linear, residual add, layer_norm, softmax), then
    `code`; check_lowered_sequence counts the ops of each graph it checks in `graphs`."""
    return textwrap.dedent(_MLP) + textwrap.dedent(code)


def test_a_compiled_mlp_is_checked_as_one_program(py):
    proc = py(_mlp("""
        with cs.checking():
            model(x).square().sum().backward()
        model(x)                                        # outside the block: not checked
        print("GRAPHS", graphs)
        """))
    out = proc.stdout + proc.stderr
    assert "GRAPHS [9, 18]" in out, out
    assert "_forward_1 checked: its 9 ops' program agrees" in out
    # the backward graph reads a view of an intermediate: refused, with the reason
    assert "not checked: aten::mm (op 6 of a sequence of 18): reads a view of an " \
           "intermediate" in out, out


def test_a_broken_rule_in_a_compiled_graph_raises_naming_the_op(py):
    proc = py(_mlp("""
        from neuron_sim.lower.context import LowerCtx
        from neuron_sim.lower.registry import RULES
        store, rule = LowerCtx.store, RULES["aten::_softmax"]

        def broken(ctx, op):        # its stores go to p - 1 partitions: every offset moved
            LowerCtx.store = lambda self, t, tile, p, j, f, off=None: store(
                self, t, LowerCtx.cols(tile, p - 1, 0, f), p - 1, j, f, off)
            try:
                rule(ctx, op)
            finally:
                LowerCtx.store = store
        broken.__name__ = rule.__name__
        RULES["aten::_softmax"] = broken
        cs.check_lowered = lambda *a, **k: None     # each op alone would raise first
        try:
            with torch.no_grad(), cs.checking():
                model(x)
        except RuntimeError as e:
            print("RAISED", e)
        """))
    assert "RAISED op 7 of a sequence of 8: aten::_softmax: output 0 of its lowered program" \
        in proc.stdout, proc.stdout + proc.stderr


def test_the_setting_checks_compiled_graphs(py):
    proc = py(_mlp("""
        with torch.no_grad():
            model(x)
        print("GRAPHS", graphs)
        """), env={"NEURON_SIM_CHECK_SEMANTICS": "1"})
    assert "GRAPHS [8]" in proc.stdout, proc.stdout + proc.stderr


def test_unchecked_launches_do_not_load_the_check(py):
    proc = py("""
        import sys, torch, torch_neuronx
        model = torch.compile(torch.nn.Linear(8, 8).to("neuron"), backend="neuron")
        with torch.no_grad():
            model(torch.randn(4, 8, device="neuron"))
        print("LOADED", "torch_neuronx.check_semantics" in sys.modules,
              "neuron_sim.lower.semantics" in sys.modules)
        """)
    assert "LOADED False False" in proc.stdout, proc.stdout + proc.stderr


def test_a_training_step_with_batch_norm_and_layer_norm_is_checked(py):
    # the norms (batch norm training and evaluating: channels of an NCHW tensor on partitions)
    # and their backward ops (from the saved mean and rstd) compute the op
    proc = py("""
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        checked = []
        check = cs.check_lowered
        cs.check_lowered = lambda op, *a, **k: checked.append(op.name) or check(op, *a, **k)
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.BatchNorm2d(8), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 64),
            torch.nn.LayerNorm(64), torch.nn.Linear(64, 10)).to("neuron")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(16, 8, 6, 6, device="neuron")
        with cs.checking():
            model(x).square().mean().backward()
            opt.step()
            model.eval()
            model(x)
        torch.neuron.synchronize()
        print(sorted(checked))
        """)
    out = proc.stdout
    assert out.count("'aten::native_batch_norm'") == 2, out      # training, then evaluating
    for name in ("aten::native_layer_norm", "aten::native_layer_norm_backward",
                 "aten::native_batch_norm_backward"):
        assert repr(name) in out, (name, out)


def test_a_model_step_with_biases_and_scalings_is_checked(py):
    # broadcast operands (a bias row, per-row scales, a 0-d temperature, a mask) and a scalar
    # first (1 - y: rsub) in a forward and backward step, each checked against the CPU result
    proc = py("""
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        checked = []
        check = cs.check_lowered
        cs.check_lowered = lambda op, *a, **k: checked.append(
            (op.name, tuple(t.numel for t in op.inputs))) or check(op, *a, **k)
        torch.manual_seed(0)
        dev = dict(device="neuron")
        x = torch.randn(3, 100, 64, **dev)
        bias = torch.randn(64, **dev, requires_grad=True)
        gain = torch.randn(3, 100, 1, **dev).requires_grad_()
        temp = torch.tensor(0.5, **dev, requires_grad=True)
        mask = torch.randn(1, 100, 64, **dev)
        with cs.checking():
            rms = x.pow(2).mean(-1, keepdim=True).sqrt()        # x / rms: no gradient
            h = (x + bias) * gain / rms
            y = h / temp + mask
            loss = (1 - y).pow(2).mean()
            loss.backward()
        torch.neuron.synchronize()
        print(sorted({n for n, sizes in checked if len(set(sizes)) > 1}))
        print("RSUB", any(n.startswith("aten::rsub") for n, _ in checked))
        """)
    out = proc.stdout
    for name in ("aten::add.Tensor", "aten::mul.Tensor", "aten::div.Tensor"):
        assert repr(name) in out, (name, out)
    assert "RSUB True" in out, out


def _recording(code: str) -> str:
    """`code` after a preamble that records in `checked` the name of every op check_lowered
    compares (torch seeded)."""
    return textwrap.dedent("""
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        checked = []
        check = cs.check_lowered
        cs.check_lowered = lambda op, *a, **k: checked.append(op.name) or check(op, *a, **k)
        torch.manual_seed(0)
        """) + textwrap.dedent(code)


def test_a_model_step_checks_its_activation_and_loss_backward_ops(py):
    # an MLP with GELU and SiLU, an MSE loss, its backward and an AdamW step: every exact op
    # agrees with its program, the activations' backward ops (their derivative tables) and
    # AdamW's lerp, addcmul and addcdiv among them
    proc = py(_recording("""
        import torch.nn.functional as F
        w1 = torch.randn(256, 128, device="neuron", requires_grad=True)
        w2 = torch.randn(128, 256, device="neuron", requires_grad=True)
        x = torch.randn(64, 128, device="neuron")
        opt = torch.optim.AdamW([w1, w2], lr=1e-3, foreach=False)
        with cs.checking():
            h = F.silu(F.gelu(x @ w1.T) @ w2.T)
            loss = F.mse_loss(h, torch.zeros_like(h))
            loss.backward()
            opt.step()
        torch.neuron.synchronize()
        print(sorted(set(checked)))
        """))
    out = proc.stdout
    for name in ("aten::gelu", "aten::gelu_backward", "aten::silu", "aten::silu_backward",
                 "aten::mse_loss", "aten::mse_loss_backward", "aten::lerp_.Scalar",
                 "aten::addcmul_", "aten::addcdiv_"):
        assert repr(name) in out, (name, out, proc.stderr[-2000:])


def test_an_adamw_training_step_is_checked_fused_and_foreach(py):
    # in-place ops return nothing: their written arguments (params, moments, steps) are compared
    proc = py(_recording("""
        for kw in (dict(fused=True), dict(foreach=True)):
            model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(),
                                        torch.nn.Linear(96, 8)).to("neuron")
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **kw)
            x = torch.randn(32, 64, device="neuron")
            with cs.checking():
                for _ in range(2):
                    opt.zero_grad()
                    model(x).square().mean().backward()
                    opt.step()
        torch.neuron.synchronize()
        print(sorted(set(checked)))
        """))
    for name in ("aten::_fused_adamw_", "aten::_foreach_add_.Scalar", "aten::_foreach_sqrt",
                 "aten::_foreach_mul_.Scalar"):
        assert repr(name) in proc.stdout, (name, proc.stdout)

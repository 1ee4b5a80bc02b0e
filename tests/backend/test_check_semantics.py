"""backend/torch_neuronx/check_semantics.py: eager ops on the device checked against their
lowered programs run through the ISA semantics (neuron_sim/lower/semantics.py)."""

import pytest

pytest.importorskip("torch")


def test_exact_eager_ops_are_checked_and_agree(py):
    proc = py("""
        import torch, torch_neuronx
        import torch.nn.functional as F
        from torch_neuronx import check_semantics as cs
        checked = []
        check = cs.check_lowered
        cs.check_lowered = lambda op, *a: checked.append(op.name) or check(op, *a)
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
            w = torch.cos(x)                      # timing-only: not checked
        torch.neuron.synchronize()
        print(sorted(set(checked)))
        """)
    out = proc.stdout
    for name in ("aten::exp", "aten::add.Tensor", "aten::mul_.Tensor", "aten::sum.dim_IntList",
                 "aten::_softmax", "aten::cat", "aten::_to_copy"):
        assert repr(name) in out, (name, out)
    assert "aten::cos" not in out


def test_a_rule_that_computes_something_else_raises_naming_the_op(py):
    proc = py("""
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        from neuron_sim.lower import semantics
        semantics.EXACT["unary_activation"].add("aten::cos")     # it is charged as sin
        x = torch.randn(128, 1001, device="neuron")
        try:
            with cs.checking():
                torch.cos(x)
        except RuntimeError as e:
            print("RAISED", e)
        """)
    assert "RAISED aten::cos: output 0 of its lowered program" in proc.stdout
    assert "input shapes [(128, 1001)]" in proc.stdout and "by up to" in proc.stdout


def test_the_setting_turns_the_check_on_for_the_process(py):
    code = """
        import torch, torch_neuronx
        from torch_neuronx import check_semantics as cs
        from neuron_sim.lower import semantics
        semantics.EXACT["unary_activation"].add("aten::cos")
        print("AT IMPORT", len(cs._installed))        # import torch_neuronx entered it
        print("ON", cs.install_if_set(), len(cs._installed))     # once
        try:
            torch.cos(torch.randn(16, 16, device="neuron"))
        except RuntimeError as e:
            print("RAISED", str(e)[:20])
        """
    on = py(code, env={"NEURON_SIM_CHECK_SEMANTICS": "1"}).stdout
    assert "AT IMPORT 1" in on and "ON True 1" in on and "RAISED aten::cos" in on
    off = py(code).stdout
    assert "AT IMPORT 0" in off and "ON False 0" in off and "RAISED" not in off

"""Advice that pays off (issue 17): device time grouped into forward, backward and optimizer from
the trace's own annotations, and each recommendation's stated saving checked by applying it and
re-simulating the step (within 25%, the issue's tolerance)."""

import json
import os
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from neuron_sim.explorer import summary_from_trace
from neuron_sim.explorer.phases import PHASES, phase_breakdown
from neuron_sim.explorer.summary import NOT_RETIMED
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, prepare_trace
from torch_neuronx.profiling.advice import COMPILE

sys.path.insert(0, os.path.dirname(__file__))
from training import small_training_step  # noqa: E402

ACT = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
STEPS = 2
ADAM_OPS = {"aten::mul", "aten::lerp_", "aten::addcmul_", "aten::sqrt", "aten::div_",
            "aten::add_", "aten::addcdiv_"}


def make_step(opt_cls, log_loss=False, **opt_kw):
    return small_training_step(opt_cls, warm_steps=2, log_loss=log_loss, **opt_kw)


def neuron_profile(step, out_dir):
    cfg = NeuronConfig(profile_output_dir=str(out_dir))
    exporter = NeuronProfiler(cfg)
    with profile(activities=ACT, experimental_config=cfg, on_trace_ready=exporter.export_trace):
        for _ in range(STEPS):
            step()
    with open(f"{exporter.last_output_dir}/trace.json") as f:
        return summary_from_trace(json.load(f))


def test_device_time_by_phase(tmp_path):
    step = make_step(torch.optim.AdamW)
    with profile(activities=ACT) as prof:
        step()
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    ph = phase_breakdown(trace)
    device = sum(float(e["dur"]) * 1e3 for e in trace["traceEvents"]
                 if (e.get("args") or {}).get("device_type") == "neuron")
    assert sum(ph[p]["ns"] for p in PHASES) == pytest.approx(device, rel=1e-9)
    assert ph["other"]["ns"] == 0          # every device row has its launch row
    assert ph["optimizer_classes"] == ["AdamW"]
    assert {n.split(".")[0] for n in ph["optimizer"]["ops"]} <= ADAM_OPS
    assert "aten::addmm" in ph["forward"]["ops"] and "aten::mm" in ph["backward"]["ops"]
    assert "aten::gelu_backward" in ph["backward"]["ops"]
    assert all(ph[p]["ns"] > 0 for p in ("forward", "backward", "optimizer"))
    # the summary of the same trace, written in the profiling process, carries and prints them
    prepare_trace(str(path))
    s = summary_from_trace(json.loads(path.read_text()))
    assert s.phases["optimizer"]["ns"] == ph["optimizer"]["ns"]
    assert "device time by phase  forward" in s.text()


def test_phases_of_the_profile_equal_the_exported_trace(tmp_path):
    """explorer_summary(prof) reads the phases from the profile's own events (phase_trace): each
    device row is placed by the op that issued it, as in the exported trace. The plugin's launch
    event with the same id sits elsewhere in torch's event list: taken instead, forward and
    backward rows of a 3-step AdamW profile fell into the optimizer (demo GPT: 368 of 1935)."""
    from torch_neuronx.profiling.profiler import phase_trace
    step = make_step(torch.optim.AdamW)
    with profile(activities=ACT) as prof:
        for _ in range(3):
            step()
    own = phase_breakdown(phase_trace(prof))
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    exported = phase_breakdown(json.loads(path.read_text()))
    for p in PHASES:
        assert (own[p]["count"], own[p]["ops"]) == (exported[p]["count"], exported[p]["ops"]), p
    assert {n.split(".")[0] for n in own["optimizer"]["ops"]} <= ADAM_OPS
    assert own["forward"]["count"] % 3 == 0 and own["backward"]["count"] % 3 == 0


def mixed_dtype_step(**opt_kw):
    """fp32 and bf16 parameters: torch's fused AdamW runs one kernel per dtype group."""
    torch.manual_seed(0)
    a = torch.nn.Linear(256, 512).to("neuron")
    b = torch.nn.Linear(512, 256).to("neuron", torch.bfloat16)
    opt = torch.optim.AdamW(list(a.parameters()) + list(b.parameters()), **opt_kw)
    x = torch.randn(64, 256, device="neuron")

    def step():
        opt.zero_grad()
        b(torch.nn.functional.gelu(a(x)).bfloat16()).float().pow(2).mean().backward()
        opt.step()
        torch.neuron.synchronize()
    step()
    step()
    return step


@pytest.mark.parametrize("case", ["AdamW", "Adam", "AdamW amsgrad", "AdamW fp32+bf16"])
def test_fused_optimizer_saving_is_what_the_change_saves(tmp_path, case):
    if case == "AdamW fp32+bf16":
        make = mixed_dtype_step
    else:
        opt_cls = getattr(torch.optim, case.split()[0])
        extra = {"amsgrad": True} if "amsgrad" in case else {}

        def make(**kw):
            return make_step(opt_cls, **extra, **kw)
    s = neuron_profile(make(), tmp_path / "loop")
    recs = [r for r in s.recommendations if "fused=True" in r["title"]]
    assert recs, s.text()
    rec = recs[0]
    assert rec["checked"] == "re-timed" and s.recommendations[0] is rec
    predicted = rec["saving_ns"]
    assert f"{predicted / 1e6:.3f} ms shorter" in rec["detail"]
    assert s.phases["optimizer"]["ns"] / STEPS > predicted > 0
    # every other recommendation says it was not re-timed
    assert all(r["checked"].startswith(NOT_RETIMED) and "saving_ns" not in r
               for r in s.recommendations[1:])
    assert s.text().count("       saving: ") == len(s.recommendations)
    assert f"saving: {predicted / 1e6:.3f} ms per step, re-timed" in s.text()

    fused = neuron_profile(make(fused=True), tmp_path / "fused")
    actual = (s.total_ns - fused.total_ns) / STEPS
    assert actual > 0
    assert abs(predicted - actual) <= 0.25 * actual, (predicted, actual)
    assert not [r for r in fused.recommendations if "fused=True" in r["title"]]


def test_advice_from_the_latest_batches_only(tmp_path, monkeypatch):
    """The session keeps only its latest drained batches (bounded memory on long profiles): the
    re-timed saving of a long profile is the same, and the per-step figures count every step."""
    from torch_neuronx.profiling import hook
    step = make_step(torch.optim.AdamW)
    full = neuron_profile(step, tmp_path / "full")
    monkeypatch.setattr(hook, "_MAX_BATCH_OPS", 120)       # ~2 steps of this model
    monkeypatch.setattr(sys.modules[__name__], "STEPS", 6)
    trimmed = neuron_profile(step, tmp_path / "trimmed")
    assert len(hook.SESSION.batches) <= 3
    a, b = (next(r for r in s.recommendations if "fused=True" in r["title"])
            for s in (full, trimmed))
    assert b["saving_ns"] == a["saving_ns"]
    assert b["detail"].split(":")[1] == a["detail"].split(":")[1]   # optimizer ms per step


def test_sync_point_saving_is_what_removing_it_saves(tmp_path):
    """loss.item() between forward and backward drains the queue mid-step: the advice re-times the
    step with one drain, and removing the .item() saves that (fused AdamW: the only advice)."""
    s = neuron_profile(make_step(torch.optim.AdamW, log_loss=True, fused=True), tmp_path / "a")
    rec = next(r for r in s.recommendations if r["title"] == "Synchronise once per step")
    assert rec["checked"] == "re-timed" and rec["metric"] == "2.0 drains per step"
    assert not [r for r in s.recommendations if "fused=True" in r["title"]]
    once = neuron_profile(make_step(torch.optim.AdamW, fused=True), tmp_path / "b")
    actual = (s.total_ns - once.total_ns) / STEPS
    assert actual > 0 and abs(rec["saving_ns"] - actual) <= 0.25 * actual, (rec, actual)
    assert not [r for r in once.recommendations if r["title"] == "Synchronise once per step"]


def test_failing_advice_leaves_a_note_not_a_lost_trace(tmp_path, monkeypatch):
    from torch_neuronx.profiling import advice

    def broken(_phased, _total_ns):
        raise KeyError("boom")
    monkeypatch.setattr(advice, "sync_points", broken)
    s = neuron_profile(make_step(torch.optim.AdamW), tmp_path)
    assert any("broken failed (KeyError: 'boom')" in n for n in s.notes)
    assert "fused=True" in s.recommendations[0]["title"]      # the other advice still there


def mlp_step(d, h, n, bf16=False, compiled=False):
    """Linear(d, h), GELU, Linear(h, d) on n rows, fused AdamW; `bf16`: the forward under
    torch.autocast('neuron', dtype=torch.bfloat16), as the bf16 advice proposes; `compiled`: the
    function returning the loss under torch.compile(backend='neuron'), as the compile advice
    proposes."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.GELU(),
                            torch.nn.Linear(h, d)).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), fused=True)
    x = torch.randn(n, d, device="neuron")

    def loss_of(x):
        return m(x).pow(2).mean()
    if compiled:
        loss_of = torch.compile(loss_of, backend="neuron")

    def step():
        opt.zero_grad()
        with torch.autocast("neuron", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(x)
        loss.backward()
        opt.step()
        torch.neuron.synchronize()
    step()
    step()
    return step


BF16 = "Train in bf16: torch.autocast('neuron', dtype=torch.bfloat16)"


@pytest.mark.parametrize("dims", [(1024, 4096, 512), (64, 64, 32)], ids=["pays", "does-not-pay"])
def test_bf16_saving_is_what_autocast_saves(tmp_path, dims):
    """The bf16 advice re-times the steps with autocast's casts (the issue's backfiring advice):
    big matmuls gain more than the casts cost and it is recommended with a saving within 25% of
    what autocast saves; on tiny matmuls the casts cost more, and it is not recommended (a note
    gives the re-timed loss, within 25% of the loss autocast measures)."""
    s = neuron_profile(mlp_step(*dims), tmp_path / "fp32")
    amp = neuron_profile(mlp_step(*dims, bf16=True), tmp_path / "bf16")
    actual = (s.total_ns - amp.total_ns) / STEPS
    step_ns = s.total_ns / STEPS
    recs = [r for r in s.recommendations if r["title"] == BF16]
    assert not [r for r in amp.recommendations if r["title"] == BF16]   # nothing left to cast
    if dims[0] == 1024:
        assert recs, s.text()
        rec = recs[0]
        assert rec["checked"] == "re-timed" and rec["metric"] == "11 casts per step"
        assert f"saving: {rec['saving_ns'] / 1e6:.3f} ms per step, re-timed" in s.text()
        assert actual > 0.05 * step_ns
    else:
        assert not recs
        note = next(n for n in s.notes if n.startswith(f"not recommended: {BF16}"))
        assert "ms longer" in note and "11 casts" in note
        rec = s.not_recommended[0]
        assert rec["title"] == BF16 and rec["saving_ns"] < 0
        assert actual < 0                        # measured: autocast makes these steps longer
    assert abs(rec["saving_ns"] - actual) <= 0.25 * abs(actual), (rec["saving_ns"], actual)


def gpt_step(compiled=False):
    """The demo GPT (examples/gpt, batch 8) with fused AdamW; `compiled`: the model, which
    returns its loss, under torch.compile(backend='neuron')."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt"))
    from gpt_model import GPT, GPTConfig, make_batch
    torch.manual_seed(0)
    cfg = GPTConfig()
    model = GPT(cfg).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x, y = (t.to("neuron") for t in make_batch(cfg, 8))
    run = torch.compile(model, backend="neuron") if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        run(x, y).backward()
        opt.step()
        torch.neuron.synchronize()
    step()
    step()
    return step


@pytest.mark.parametrize("model", ["gpt", "mlp"])
def test_compile_saving_is_what_compiling_saves(tmp_path, model):
    """The compile advice re-times the steps with the forward (and loss) and the backward as one
    compiled graph each, priced as the compile backend prices a graph; compiling the loss
    function then saves that within 25%. The demo GPT gains (one program instead of many AEE
    groups); the small MLP loses (two graph launches and the gradient seed's own launch cost
    more than AEE's few fused groups): not recommended, a note gives the re-timed loss."""
    make = gpt_step if model == "gpt" else (lambda compiled=False: mlp_step(
        256, 512, 64, compiled=compiled))
    s = neuron_profile(make(), tmp_path / "eager")
    comp = neuron_profile(make(compiled=True), tmp_path / "compiled")
    actual = (s.total_ns - comp.total_ns) / STEPS
    rec = next(r for r in s.recommendations + s.not_recommended if r["title"] == COMPILE)
    assert rec["checked"] == "re-timed" and rec["metric"] == "2 graphs per step"
    assert abs(rec["saving_ns"] - actual) <= 0.25 * abs(actual), (rec["saving_ns"], actual)
    if model == "gpt":
        assert rec in s.recommendations and actual > 0.05 * s.total_ns / STEPS
        assert f"saving: {rec['saving_ns'] / 1e6:.3f} ms per step, re-timed" in s.text()
    else:
        assert rec in s.not_recommended and actual < 0
        assert any(n.startswith(f"not recommended: {COMPILE}") and "ms longer" in n
                   for n in s.notes)
    # the launch threshold's unpriced advice gives way to the re-timed one
    assert not [r for r in s.recommendations if r.get("kind") == "launch"]
    # nothing left to compile in the compiled steps
    assert not [r for r in comp.recommendations + comp.not_recommended if r["title"] == COMPILE]


APPLIED = {"fused_optimizer": test_fused_optimizer_saving_is_what_the_change_saves,
           "sync_points": test_sync_point_saving_is_what_removing_it_saves,
           "bf16_autocast": test_bf16_saving_is_what_autocast_saves,
           "compiled_step": test_compile_saving_is_what_compiling_saves}


def test_every_retimed_recommendation_is_applied_by_a_test():
    """Each re-timed recommendation kind has a test here that applies it and checks its saving
    within 25%; the threshold kinds say why they state no saving (test_explorer_summary)."""
    from torch_neuronx.profiling import advice
    assert list(advice.RETIMED) == list(APPLIED)

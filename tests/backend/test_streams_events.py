"""Streams and events: simulated timestamps, deterministic, across streams."""

import pytest
import torch


def _work(n=256, reps=4):
    a = torch.ones(n, n, device="neuron")
    for _ in range(reps):
        a = a @ a / n
    return a


def _timed(fn):
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def test_elapsed_time_is_simulated_and_deterministic():
    first = _timed(_work)
    second = _timed(_work)
    assert first > 0 and first == second  # same program, same simulated time
    assert _timed(lambda: _work(reps=8)) > first


def _record_ns():
    import torch_neuronx
    return round(torch_neuronx._visible().instance.chip.cross_engine_semaphore_latency_s * 1e9)


def test_elapsed_time_matches_device_clock():
    import torch_neuronx
    torch.neuron.synchronize()
    t0 = torch_neuronx.device_time_ns()
    ms = _timed(_work)
    t1 = torch_neuronx.device_time_ns()
    # The clock also advanced by the first record, which precedes the start stamp.
    assert t1 - t0 == pytest.approx(ms * 1e6 + _record_ns(), rel=1e-9)


def test_back_to_back_records_cost_one_semaphore_write():
    # A record is one semaphore write on its queue (75 ns on Trn2), never free: CUDA
    # also reports a small positive time for two events recorded back to back.
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    start.record()
    end.record()
    assert _record_ns() == 75
    assert start.elapsed_time(end) == pytest.approx(75e-6, rel=1e-9)


def test_streams_without_index_are_on_the_current_device():
    s = torch.Stream(device="neuron")
    assert s.device == torch.device("neuron", 0)
    with torch.neuron.device(1):
        assert torch.Stream(device="neuron").device == torch.device("neuron", 1)
        assert torch.neuron.current_stream().device == torch.device("neuron", 1)
    e = torch.Event(device="neuron", enable_timing=True)
    e.record(torch.Stream(device="neuron"))
    assert e.query()


def test_event_query_synchronize_and_errors():
    e = torch.Event(enable_timing=True)
    e.record()
    assert e.query()
    e.synchronize()
    other = torch.Event(enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        e.elapsed_time(other)  # never recorded


def test_torch_neuronx_stream_api():
    import torch_neuronx
    s = torch_neuronx.Stream()
    assert s.device.type == "neuron"
    # Without NEURON_RT_ENABLE_HOST_CC new streams alias the default stream (TorchNeuron).
    assert s == torch.neuron.default_stream()
    with torch_neuronx.stream(s):
        assert torch.neuron.current_stream() == s
    ev = torch_neuronx.Event(enable_timing=True)
    ev.record()
    torch_neuronx.synchronize()


def test_host_cc_streams_overlap_and_wait(py):
    out = py("""
        import torch
        s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()
        assert s1 != s2 and s1.stream_id != 0
        a = torch.ones(512, 512, device="neuron")
        start = torch.Event(enable_timing=True); start.record()
        done1 = torch.Event(enable_timing=True); done2 = torch.Event(enable_timing=True)
        with torch.neuron.stream(s1):
            start.wait()
            for _ in range(4): b = a @ a
            done1.record()
        with torch.neuron.stream(s2):
            start.wait()
            for _ in range(4): c = a @ a
            done2.record()
        one = start.elapsed_time(done1); two = start.elapsed_time(done2)
        torch.neuron.current_stream().wait_event(done1)
        torch.neuron.current_stream().wait_event(done2)
        end = torch.Event(enable_timing=True); end.record()
        print(one, two, start.elapsed_time(end))
    """, {"NEURON_RT_ENABLE_HOST_CC": "1"}).stdout.split()
    one, two, joined = map(float, out)
    # The join is the later branch plus the end event's own record (75 ns).
    assert one == pytest.approx(two) and joined == pytest.approx(max(one, two) + 75e-6)


def test_simulated_time_is_the_same_in_every_process(py):
    # With Adaptive Eager Execution on, fused programs are lowered fresh in each process: their
    # timing must not depend on object addresses or anything else that changes between runs.
    code = """
        import sys, torch
        sys.path.insert(0, "examples/gpt")
        from gpt_model import GPT, GPTConfig, make_batch, train_step
        torch.manual_seed(0)
        cfg = GPTConfig()  # the demo model: big enough for many fused programs
        model = GPT(cfg).to("neuron")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = (t.to("neuron") for t in make_batch(cfg, 8))
        train_step(model, opt, x, y).item()
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        start.record(); train_step(model, opt, x, y).item(); end.record()
        print(repr(start.elapsed_time(end)))
    """
    runs = {py(code).stdout.strip() for _ in range(3)}
    assert len(runs) == 1, runs

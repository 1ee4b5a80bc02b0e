"""The Explorer-style summary, torch-free: constructed programs get the right verdict and
recommendations; lanes are capped, labelled and deterministic; a summary survives a saved trace."""

import json
import os
import sys

import pytest

import neuron_sim as ns
from neuron_sim.explorer import (OpRecord, Summary, lane_spans, summarize, summarize_result,
                                 summary_from_trace)
from neuron_sim.explorer.summary import NOT_RETIMED
from neuron_sim.program import ProgramBuilder

sys.path.insert(0, os.path.dirname(__file__))
from programs import compute_bound, dma_bound, spilling  # noqa: E402


def _summary(builder, name):
    res = ns.simulate(builder.build())
    return summarize_result(res, name=name, sbuf_peak=builder.sbuf_peak_bytes_per_partition,
                            psum_peak=builder.psum_peak_bytes_per_partition), res


def _titles(s):
    """The recommendation titles; each threshold recommendation says why its saving is not
    computed, in the data and in the text (issue 17: every recommendation states its saving or
    why it has none)."""
    for r in s.recommendations:
        assert r["checked"].startswith(f"{NOT_RETIMED}: ") and "saving_ns" not in r
        assert f"saving: {r['checked']}" in s.text()
    return [r["title"] for r in s.recommendations]


def test_dma_bound_program():
    s, _ = _summary(dma_bound(), "dma_bound")
    assert s.verdict == "DMA-bound"
    assert s.engine_active_percent["DMA"] > 60 > s.engine_active_percent["VectorE"]
    assert _titles(s)[0].startswith("DMA-bound")
    assert s.dma_bytes["inputs"] == s.dma_bytes["outputs"] == 128 * 16 * 4096 * 2
    assert s.mbu > 0.2 and s.hfu == 0.0


def test_compute_bound_program():
    s, res = _summary(compute_bound(), "compute_bound")
    assert s.verdict == "compute-bound (TensorE)"
    assert not any(t.startswith("DMA-bound") for t in _titles(s))
    assert s.hfu > 0.5 and s.hfu == pytest.approx(res.summary["hfu"])
    assert s.mbu == pytest.approx(res.summary["mbu"])
    assert s.psum_peak_bytes_per_partition == 2048


def test_spill_reload_share():
    s, _ = _summary(spilling(), "spilling")
    assert s.dma_bytes["spill_save"] == 128 * 8 * 2048 * 2
    assert s.dma_bytes["spill_reload"] == 2 * s.dma_bytes["spill_save"]
    assert "High spill reload share" in _titles(s)


def test_low_tensor_utilisation_and_transposes():
    b = ProgramBuilder("trn2")
    a = b.sbuf("a", (32, 32), "bfloat16")          # K = 32 of 128 rows: a quarter of the array
    x = b.sbuf("x", (32, 512), "bfloat16")
    acc = b.psum("acc", (32, 512), "float32")
    t = b.sbuf("t", (128, 128), "bfloat16")
    tp = b.psum("tp", (128, 128), "float32")
    for k in range(64):
        b.nc_matmul(acc, stationary=a, moving=x, accumulate=k > 0)
        b.nc_transpose(tp, t)
    s, _ = _summary(b, "small_matmuls")
    titles = _titles(s)
    assert "Low TensorE utilisation" in titles and "Transposes take TensorE time" in titles
    assert 2 <= len(titles) <= 4


def test_launch_bound_region_from_records():
    recs = [OpRecord("aten::add.Tensor", 10, 30_000.0, 25_000.0,
                     {"VectorE": 3000.0, "DMA": 4000.0})]
    s = summarize(recs, chip="trn2", peak_flops=1e14, hbm_bytes_per_s=1e12)
    assert s.verdict.startswith("launch-bound")
    assert _titles(s) == ["Per-op launch overhead dominates"]
    assert s.top_ops[0]["percent"] == 100.0


def test_compiled_graph_launches_and_roofline_estimates():
    recs = [OpRecord("neuron::graph.fwd_0", 10, 30_000.0, 12_000.0, {"VectorE": 3000.0}),
            OpRecord("aten::cumsum", 2, 8_000.0, 0.0, {}, estimated=2)]
    s = summarize(recs, chip="trn2", peak_flops=1e14, hbm_bytes_per_s=1e12)
    assert _titles(s) == ["Launch overhead dominates the compiled graphs",
                          "Part of the time is a roofline estimate"]


def test_lanes_capped_labelled_deterministic():
    res = ns.simulate(dma_bound().build())
    spans = lane_spans(res, max_spans=3)
    per_lane = {}
    for sp in spans:
        per_lane[sp.lane] = per_lane.get(sp.lane, 0) + 1
    assert set(per_lane) >= {"VectorE", "DMA q0"} and max(per_lane.values()) <= 3
    assert all(sp.duration_ns > 0 and sp.label for sp in spans)
    assert any("% busy" in sp.label for sp in spans)      # merged spans admit their idle time
    assert spans == lane_spans(ns.simulate(dma_bound().build()), max_spans=3)
    one = lane_spans(res, max_spans=3, dma="one")
    assert {sp.lane for sp in one if sp.lane.startswith("DMA")} == {"DMA"}
    # the busy time inside the spans never exceeds the engine's active time
    vec = sum(sp.duration_ns for sp in lane_spans(res, max_spans=10**6) if sp.lane == "VectorE")
    assert vec == pytest.approx(res.engine_busy_ns["VectorE"])


def test_summary_round_trips_through_a_saved_trace(tmp_path):
    s, _ = _summary(spilling(), "spilling")
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [], "neuronExplorer": {"summary": s.to_dict()}}))
    back = summary_from_trace(json.loads(path.read_text()))
    assert isinstance(back, Summary) and back.to_dict() == s.to_dict()
    from neuron_sim.cli import main
    assert main(["explorer", str(path), "--top", "3"]) == 0


def test_cli_without_neuron_rows_says_why(tmp_path, capsys):
    from neuron_sim.cli import main
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::add", "pid": 1,
                                                 "tid": 1, "ts": 0, "dur": 1}]}))
    assert main(["explorer", str(path)]) == 1
    assert "PrivateUse1" in capsys.readouterr().err


def test_each_command_has_its_own_help(capsys):
    from neuron_sim.cli import main
    with pytest.raises(SystemExit) as e:
        main(["explorer", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: neuron-sim explorer") and "--top" in out and "--plot" in out
    with pytest.raises(SystemExit):
        main(["chips", "--top", "3"])            # explorer's options belong to explorer only
    assert "unrecognized arguments: --top" in capsys.readouterr().err


def test_figures(tmp_path):
    pytest.importorskip("matplotlib", reason="figures need the notebooks extra (matplotlib)")
    from neuron_sim.explorer.plots import plot_lanes, plot_summary
    s, res = _summary(compute_bound(), "compute_bound")
    plot_summary(s).savefig(tmp_path / "s.png")
    plot_lanes(lane_spans(res)).savefig(tmp_path / "l.png")
    assert (tmp_path / "s.png").stat().st_size > 1000 and (tmp_path / "l.png").stat().st_size > 1000


def test_explorer_imports_without_torch_or_matplotlib():
    import subprocess
    code = ("import sys, neuron_sim.explorer; "
            "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)

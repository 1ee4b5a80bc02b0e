"""The neuron generator's state is TorchNeuron's 16 bytes (8-byte seed, 8-byte offset), the
layout DTensor's offset-based RNG tracker reads and writes."""

import json
from pathlib import Path

import pytest
import torch

WORKERS = Path(__file__).resolve().parent / "workers"


def _split(state):
    return int(state[:8].view(torch.int64)), int(state[8:].view(torch.int64))


def test_state_is_seed_then_offset():
    torch.manual_seed(77)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert _split(state) == (77, 0)
    torch.randn(10, device="neuron")            # 10 values: the offset moves in steps of 4
    assert _split(torch.neuron.get_rng_state()) == (77, 12)
    g = torch.neuron.default_generators[0]
    assert (g.initial_seed(), g.get_offset()) == (77, 12)


def test_same_state_gives_same_values_and_round_trips():
    torch.manual_seed(5)
    torch.rand(3, device="neuron")
    state = torch.neuron.get_rng_state()
    a = torch.randn(6, 7, device="neuron").cpu()
    b = torch.nn.functional.dropout(torch.ones(64, device="neuron"), 0.5).cpu()
    after = torch.neuron.get_rng_state()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.neuron.get_rng_state(), state)
    assert torch.equal(a, torch.randn(6, 7, device="neuron").cpu())
    assert torch.equal(b, torch.nn.functional.dropout(torch.ones(64, device="neuron"), 0.5).cpu())
    assert torch.equal(torch.neuron.get_rng_state(), after)
    # A different offset is a different stream; the offset alone selects it.
    seed, offset = _split(state)
    moved = state.clone()
    moved[8:] = torch.tensor([offset + 4], dtype=torch.int64).view(torch.uint8)
    torch.neuron.set_rng_state(moved)
    assert not torch.equal(a, torch.randn(6, 7, device="neuron").cpu())


def test_manual_seed_matches_cpu_for_the_first_draw():
    # Offset 0 draws from the seed itself: manual_seed(s) then one random op equals CPU's.
    torch.manual_seed(9)
    x = torch.randn(33, device="neuron").cpu()
    torch.manual_seed(9)
    assert torch.equal(x, torch.randn(33))


def test_explicit_generator_and_fork_rng():
    g = torch.Generator(device="neuron").manual_seed(3)
    x = torch.rand(5, device="neuron", generator=g)
    assert _split(g.get_state()) == (3, 8)
    g.set_state(torch.Generator(device="neuron").manual_seed(3).get_state())
    assert torch.equal(x.cpu(), torch.rand(5, device="neuron", generator=g).cpu())
    torch.manual_seed(1)
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        torch.randn(100, device="neuron")
    assert _split(torch.neuron.get_rng_state()) == (1, 0)


def test_bad_state_is_rejected_with_the_expected_layout():
    with pytest.raises(RuntimeError, match="expected 16 bytes .*seed.*offset.* got 5056"):
        torch.neuron.set_rng_state(torch.get_rng_state())   # a CPU mt19937 state
    with pytest.raises(TypeError, match="uint8"):
        torch.neuron.set_rng_state(torch.zeros(2, dtype=torch.int64))


def test_dtensor_random_ops_through_the_offset_tracker():
    from dist_launch import describe, launch
    results, _ = launch(WORKERS / "dtensor_rng.py", nprocs=2, timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    r0, r1 = (json.loads(r.stdout.strip().splitlines()[-1]) for r in results)
    for r in (r0, r1):
        assert (r["state_bytes"], r["seed"], r["offset_before"]) == (16, 1234, 0)
        assert r["offset_after"] == 48                   # every rank skips the whole 8x6 tensor
    assert r0["full"] == r1["full"]                      # one DTensor
    assert r0["full"][:4] != r0["full"][4:]              # whose shards differ
    assert r0["replicated"] == r1["replicated"]          # replicas agree
    assert r0["local"] != r1["local"]                    # re-initialised shards differ too


def test_graphsafe_states_share_and_swap():
    gen = torch.neuron.default_generators[0]
    gen.manual_seed(5)
    view = gen.graphsafe_get_state()          # shares the generator's (seed, offset)
    torch.rand(8, device="neuron")
    assert view.get_offset() == gen.get_offset() > 0
    other = gen.clone_state().manual_seed(9)  # a separate state
    gen.graphsafe_set_state(other)
    assert gen.initial_seed() == 9
    gen.graphsafe_set_state(view)
    assert gen.initial_seed() == 5
    with pytest.raises(RuntimeError, match="expected the state of a neuron generator"):
        gen.graphsafe_set_state(torch.Generator())


def test_compiled_checkpoint_recomputes_the_forwards_random_values():
    # torch.compile + activation checkpointing of a region with a random op (dropout here; SDPA
    # is tagged random too) recomputes it in backward with the forward's values: neuron is a
    # graph-safe RNG device (it raised "Backend not supported for neuron" before).
    from torch.utils.checkpoint import checkpoint

    def block(x):
        return checkpoint(lambda t: torch.nn.functional.dropout(t.sin(), 0.5) * 3.0, x,
                          use_reentrant=False)

    step = torch.compile(block, backend="neuron")
    masks = []
    for _ in range(2):
        x = torch.randn(4096, device="neuron", requires_grad=True)
        out = step(x)
        out.sum().backward()
        keep = (out.detach() != 0).cpu()
        # d/dx [keep * 2 * sin(x) * 3] = keep * 6 * cos(x) only if backward drew the same mask
        torch.testing.assert_close(x.grad.cpu(), keep * 6.0 * x.detach().cpu().cos())
        assert 0.45 < keep.float().mean() < 0.55
        masks.append(keep)
    assert not torch.equal(masks[0], masks[1])  # the state advances from call to call

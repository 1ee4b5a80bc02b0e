"""Device properties, capability and allocator statistics as torch.cuda / torch.accelerator
callers read them (TorchTitan logs the chip name and reserved memory)."""

import torch


def test_properties_name_the_chip():
    props = torch.neuron.get_device_properties("neuron:1")
    assert props.name == "Trainium2" and props.chip == "trn2"
    assert props.instance == "trn2.3xlarge" and props.total_memory == 24 * 2**30
    assert (props.major, props.minor) == (3, 0) == torch.neuron.get_device_capability(1)
    assert props.multi_processor_count == props.logical_nc_config == 2


def test_accelerator_capability_lists_the_allocatable_dtypes():
    cap = torch.accelerator.get_device_capability("neuron:0")
    dtypes = set(cap["supported_dtypes"])
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                  torch.int64, torch.bool, torch.complex64):
        assert dtype in dtypes
        torch.empty(2, dtype=dtype, device="neuron")      # each one really allocates
    assert torch.qint8 not in dtypes and torch.quint8 not in dtypes


def test_reserved_and_segment_counters_follow_allocations():
    torch.neuron.synchronize()
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_stats()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
    y = torch.empty(3 << 20, dtype=torch.uint8, device="neuron")
    s = torch.neuron.memory_stats()
    assert s["reserved_bytes.all.current"] - base["reserved_bytes.all.current"] == 4 << 20
    assert s["segment.all.current"] - base["segment.all.current"] == 2
    assert torch.neuron.memory_reserved() == s["reserved_bytes.all.current"]
    del x, y
    s = torch.neuron.memory_stats()
    assert s["reserved_bytes.all.current"] == base["reserved_bytes.all.current"]
    assert s["reserved_bytes.all.peak"] == torch.neuron.max_memory_reserved() >= 4 << 20
    assert s["reserved_bytes.all.freed"] - base["reserved_bytes.all.freed"] == 4 << 20
    assert torch.accelerator.max_memory_reserved(0) == torch.neuron.max_memory_reserved()

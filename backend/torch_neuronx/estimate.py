"""Will my model fit, and how fast will it run? LLM training and inference estimates on a
simulated instance, from a Hugging Face config (no weights).

    from torch_neuronx.estimate import estimate_training, estimate_inference
    t = estimate_training("llama-3.1-8b", "trn2.48xlarge", fsdp=64, seq=4096)
    print(t.report())                  # step time, tokens/s, MFU, HBM per core, breakdowns
    i = estimate_inference("llama-3.3-70b", "trn2.48xlarge", tp=64, input_len=10000,
                           output_len=1500)
    print(i.ttft_s, i.tpot_s)

Method (one rank; the ranks of a TP/FSDP/DP job run the same program):
1. The model's decoder layer is built from the config at this rank's shapes (attention heads,
   KV heads and MLP width divided by TP; KV heads replicated when TP exceeds them, as NxD does)
   on the `neuron` device, in time-only mode (no host data, so a 70B layer costs no RAM;
   time_only=False computes real CPU numerics). One layer is run and timed on the
   simulated NeuronCore (compiled with torch.compile(backend="neuron") unless compiled=False);
   the layers of a dense decoder are identical, so the model's time is the layer's x layers.
   The embedding, final norm, LM head (vocabulary divided by TP) and loss are timed once.
2. Training: forward + backward of a micro-batch, times gradient-accumulation steps, plus the
   AdamW step over this rank's parameter shard (timed on a chunk of at most OPT_CHUNK
   parameters and scaled linearly: the step is elementwise and HBM-bound).
3. Inference: prefill = the forward over the prompt (TTFT, last token's logits only); decode =
   one token's forward attending over a static KV cache of input_len + output_len positions
   (TPOT: a static cache costs the same at every step).
4. Collectives are timed by neuron_sim.collectives on the instance's fabric, rank r on logical
   core r (mesh dp x fsdp x tp, tp fastest so a TP group stays on neighbouring chips), inside the
   graph when compiled (no stand-alone launch floor): TP all-reduces of the activations (2 per
   layer forward, 2 backward), FSDP2's all-gathers (2 per layer per micro-batch) and gradient
   reduce-scatters (1 per layer per step), DP gradient all-reduces in 25 MiB buckets.
5. Step time: TP collectives are on the critical path; FSDP/DP collectives overlap compute
   (prefetch, the collective engine runs beside the NeuronCores) except the first all-gather and
   the last reduce-scatter. `step_serial_s` is the no-overlap bound.

MFU = (6 x non-embedding parameters + 6 x layers x hidden x seq) x tokens / (step x ranks x the
TensorE peak of a logical core in the dtype): the causal-attention half of PaLM's formula.
HBM per core: parameter, gradient and optimizer shards (FP32 master, m and v for BF16 training),
two unsharded layers in flight (FSDP prefetch), activations saved for backward (measured per
layer) x layers plus one layer's transient peak; for inference the weights, the KV cache and the
prefill peak. Limits: decoders of the Llama family's layout (Llama, Mistral, Qwen2/3) and
their MoE variants (Mixtral, Qwen3-MoE: experts split by TP, no expert parallelism, routed by
torch_neuronx.set_moe_routing; run eagerly, as aten::histc has no compiled lowering); BF16/FP32,
or FP8/MX matmuls (precision=, torch_neuronx.fp8_linear; dense models); no pipeline parallelism
(see torch_neuronx.distributed.spmd for how stages would be composed); host time (data loading,
HTTP serving) is not simulated.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.utils.checkpoint

from neuron_sim.collectives import estimate as collective_estimate
from neuron_sim.collectives.scale import ddp_pattern, group_cores
from neuron_sim.hardware import get_instance

# Hugging Face configs of public models, from their config.json on the Hub (no download needed).
_LLAMA3 = dict(model_type="llama", vocab_size=128256, rope_theta=500000.0, hidden_act="silu",
               rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=False,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
PRESETS = {
    "llama-3.2-1b": dict(_LLAMA3, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         tie_word_embeddings=True,
                         rope_scaling=dict(_LLAMA3["rope_scaling"], factor=32.0)),
    "llama-3.1-8b": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    "llama-3.1-70b": dict(_LLAMA3, hidden_size=8192, intermediate_size=28672,
                          num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                          head_dim=128),
    "llama-3.1-405b": dict(_LLAMA3, hidden_size=16384, intermediate_size=53248,
                           num_hidden_layers=126, num_attention_heads=128, num_key_value_heads=8,
                           head_dim=128),
}
# Mixture-of-experts models (config.json of mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B)
PRESETS["mixtral-8x7b"] = dict(
    model_type="mixtral", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
    num_local_experts=8, num_experts_per_tok=2, rope_theta=1e6, rms_norm_eps=1e-5,
    max_position_embeddings=32768, tie_word_embeddings=False, sliding_window=None)
PRESETS["qwen3-30b-a3b"] = dict(
    model_type="qwen3_moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
    moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
    num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
    norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1e6,
    rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=False)
PRESETS["llama-3.3-70b"] = PRESETS["llama-3.1-70b"]
PRESETS["llama-3-70b"] = dict(PRESETS["llama-3.1-70b"], rope_scaling=None,
                              max_position_embeddings=8192)

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32,
          "float32": torch.float32}
OPT_CHUNK = 1 << 23          # AdamW is timed on at most this many parameters, then scaled
DDP_BUCKET_BYTES = 25 << 20  # torch DDP's default bucket


def load_config(model):
    """A transformers config from a preset name (PRESETS), a local config.json path, a dict of
    config.json fields, or a config object."""
    from transformers import AutoConfig, PretrainedConfig
    if isinstance(model, PretrainedConfig):
        return model
    if isinstance(model, str):
        if model.lower() in PRESETS:
            model = PRESETS[model.lower()]
        elif model.endswith(".json"):
            with open(model) as f:
                model = json.load(f)
        else:
            raise ValueError(f"unknown model {model!r}: give one of {', '.join(sorted(PRESETS))}, "
                             "a path to a config.json, or a dict of its fields (no download is "
                             "made).")
    d = dict(model)
    kind = d.pop("model_type", None)
    if kind is None:
        raise ValueError("the config dict has no 'model_type' (e.g. 'llama'); add it.")
    return AutoConfig.for_model(kind, **d)


def _dims(cfg) -> dict:
    heads = cfg.num_attention_heads
    experts = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None) or 0
    return dict(hidden=cfg.hidden_size, layers=cfg.num_hidden_layers, heads=heads,
                kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
                head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
                ffn=getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size,
                vocab=cfg.vocab_size, experts=experts,
                top_k=getattr(cfg, "num_experts_per_tok", 0) if experts else 0)


def parameter_counts(cfg) -> dict:
    """Parameters per layer, of the embedding and LM head, and in all (Llama layout; an MoE
    layer has `experts` MLPs and a router). `active_layer`: the parameters a token uses (its
    top-k experts), for MFU."""
    d = _dims(cfg)
    h, hd = d["hidden"], d["head_dim"]
    attn = h * hd * (2 * d["heads"] + 2 * d["kv_heads"])
    if cfg.model_type.startswith("qwen3"):
        attn += 2 * hd          # RMSNorm of the queries and keys
    mlp = 3 * h * d["ffn"]
    if d["experts"]:
        layer = attn + d["experts"] * mlp + h * d["experts"] + 2 * h
        active = attn + d["top_k"] * mlp + h * d["experts"] + 2 * h
    else:
        layer = active = attn + mlp + 2 * h
    embed = d["vocab"] * h
    head = 0 if getattr(cfg, "tie_word_embeddings", False) else embed
    return dict(layer=layer, active_layer=active, embed=embed, head=head, final_norm=h,
                total=layer * d["layers"] + embed + head + h)


def _shard(cfg, tp: int, precision: str = "bf16"):
    """The config of one TP rank's layer (one layer). MoE experts are split by TP like the
    dense MLP (each rank holds every expert's 1/tp slice); expert parallelism is not modelled."""
    d = _dims(cfg)
    if d["experts"] and precision != "bf16":
        raise ValueError(f"precision {precision!r} with a mixture-of-experts model: FP8/MX "
                         "experts (torch._scaled_grouped_mm) are not modelled yet; use "
                         "precision='bf16' for MoE models.")
    if d["heads"] % tp:
        raise ValueError(f"tensor parallelism {tp} does not divide the {d['heads']} attention "
                         f"heads; choose a TP degree that divides {d['heads']}.")
    if d["kv_heads"] % tp and tp % d["kv_heads"]:
        raise ValueError(f"TP {tp} and the {d['kv_heads']} KV heads: one must divide the other "
                         "(KV heads are split, or replicated when TP exceeds them).")
    c = copy.deepcopy(cfg)
    c.num_hidden_layers = 1
    c.num_attention_heads = d["heads"] // tp
    c.num_key_value_heads = max(1, d["kv_heads"] // tp)
    c.head_dim = d["head_dim"]
    if getattr(cfg, "moe_intermediate_size", None):   # experts' MLP width (Qwen-MoE)
        c.moe_intermediate_size = -(-d["ffn"] // tp)
        c.intermediate_size = -(-cfg.intermediate_size // tp)
    else:    # the dense MLP's, or every expert's (Mixtral): split as the dense MLP's
        c.intermediate_size = -(-d["ffn"] // tp)
    c._attn_implementation = "sdpa"
    if d["experts"]:    # expert weights as 3-D tensors, one torch._grouped_mm per projection
        c._experts_implementation = "grouped_mm"
    return c


@contextlib.contextmanager
def _execution(time_only: bool | None):
    """Time-only mode (no host data) unless time_only=False; grouped-query attention as a flash
    kernel would run it (_flash_gqa)."""
    from .time_only import time_only as mode
    time_only = time_only is None or bool(time_only)
    with (mode() if time_only else contextlib.nullcontext()), _flash_gqa():
        yield time_only


@contextlib.contextmanager
def _flash_gqa():
    """The device runs SDPA with enable_gqa (what Hugging Face passes for grouped-query
    attention) on the math path (backend/csrc/aten/Attention.cpp), which materialises the
    scores: at seq 4096 that is most of a Llama-3-8B layer's time and memory. A Trainium flash
    kernel reads the shared K/V heads directly, so for estimates Hugging Face repeats the K/V
    heads instead (the repeat's copies are timed) and SDPA takes the flash path."""
    from transformers.integrations import sdpa_attention
    saved = sdpa_attention.use_gqa_in_sdpa
    sdpa_attention.use_gqa_in_sdpa = lambda *args, **kwargs: False
    try:
        yield
    finally:
        sdpa_attention.use_gqa_in_sdpa = saved


@dataclass
class Measured:
    """One timed program on the simulated core (after a warm-up run)."""
    ns: int
    engine_ns: dict
    launches: int
    launch_ns: int           # the program launches' share of ns
    peak_bytes: int
    compiled: bool = False

    def plus(self, other: "Measured") -> "Measured":
        """Both programs, one after the other."""
        from .neuron_dynamo_backend.explain import summed
        return Measured(self.ns + other.ns, summed(self.engine_ns, other.engine_ns),
                        self.launches + other.launches,
                        self.launch_ns + other.launch_ns, max(self.peak_bytes, other.peak_bytes),
                        self.compiled and other.compiled)

    @property
    def body_ns(self) -> int:
        """Time without the launches: this part's share of a larger compiled program."""
        return self.ns - self.launch_ns


def _program_ns(layer: Measured, layers: int, head: Measured, programs: int):
    """Time of the model's pass: compiled, the layers and the head are one program per pass
    (`programs` launches, e.g. forward and backward graphs); eager, every layer launches its own
    programs, as measured."""
    if layer.compiled and head.compiled:
        return layers * layer.body_ns + head.body_ns + programs * _launch_ns()
    return layers * layer.ns + head.ns


def _measure(fn, device, before=None, compiled=False) -> Measured:
    """Time `fn` on the simulated core after a warm-up call; `before` runs untimed ahead of
    each call (e.g. dropping gradients so the backward writes them instead of accumulating).
    `compiled`: compiled with torch.compile(backend="neuron"); a graph the compiler cannot take
    is timed eagerly (said in Measured.compiled)."""
    from .neuron_dynamo_backend.explain import run_timed, summed
    if compiled:
        run = torch.compile(fn, backend="neuron", dynamic=False)
        try:
            m = _measure(run, device, before)
            m.compiled = True
            return m
        except Exception:   # noqa: BLE001 - fall back to eager, reported by compiled=False
            torch._dynamo.reset()
    if before:
        before()
    fn()                                          # lowering, compilation, caches
    if before:
        before()
    torch.neuron.synchronize(device)
    torch.neuron.reset_peak_memory_stats(device)
    base = torch.neuron.memory_allocated(device)
    ns, b, g = run_timed(fn, device)           # eager ops, compiled graphs
    engines = summed(b["engine_ns"], g["engine_ns"])
    peak = torch.neuron.max_memory_allocated(device) - base
    launch_ns = b["launch_ns"] + g["launches"] * _launch_ns()
    return Measured(ns, {e: v for e, v in engines.items() if v}, b["launches"] + g["launches"],
                    int(launch_ns), peak)


def _part_ns(m: Measured) -> int:
    return m.body_ns if m.compiled else m.ns


def _launch_ns() -> int:
    """One program launch on this process's chip (what every eager program and compiled graph
    pays)."""
    import torch_neuronx
    return int(round(get_instance(torch_neuronx.get_instance()).chip.eager_launch_s * 1e9))


def _drop_grads(*tensors_or_modules):
    def drop():
        for t in tensors_or_modules:
            for p in (t.parameters() if isinstance(t, torch.nn.Module) else [t]):
                p.grad = None
    return drop


def _layer_parts(cfg_tp, device, dtype, precision="bf16", trainable=False):
    """One decoder layer at this rank's shapes, its rotary embedding and the final norm. With
    precision 'fp8'/'mx' the layer's linears (attention projections, MLP; not the MoE router,
    whose scores must stay precise) are ScaledLinears."""
    from transformers import AutoModelForCausalLM

    from .fp8_linear import quantize_linears
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg_tp)
    inner = model.model
    layer = inner.layers[0].to_empty(device=device).to(dtype)
    quantize_linears(layer.self_attn, precision, trainable)
    quantize_linears(layer.mlp, precision, trainable)
    rope = type(inner.rotary_emb)(cfg_tp).to(device)
    norm = inner.norm.to_empty(device=device).to(dtype)
    return layer, rope, norm


def _sequence_parallel(m: Measured, layer, b, s, h, tp, dev, dtype, compiled) -> Measured:
    """The layer's time with its norms and residual adds on s / tp tokens: the layer as measured
    minus those parts over s tokens plus the same parts over s / tp (each timed as its own
    compiled program, launches excluded)."""
    def parts(tokens):
        t = torch.empty(b, tokens, h, device=dev, dtype=dtype)

        def run():
            r = t + layer.input_layernorm(t)
            return r + layer.post_attention_layernorm(r)
        return _measure(run, dev, compiled=compiled)

    full, shard = parts(s), parts(-(-s // tp))
    engines = dict(m.engine_ns)
    for e in set(engines) | set(full.engine_ns) | set(shard.engine_ns):
        engines[e] = max(0.0, engines.get(e, 0) - full.engine_ns.get(e, 0)
                         + shard.engine_ns.get(e, 0))
    ns = m.ns - full.body_ns + shard.body_ns
    return Measured(ns, engines, m.launches, m.launch_ns, m.peak_bytes, m.compiled)


class _StaticKV:
    """A static KV cache of `max_len` positions for one layer (what the HF Cache interface needs:
    update writes this step's keys and values at `pos` and returns the whole buffers)."""

    def __init__(self, batch, kv_heads, max_len, head_dim, pos, device, dtype):
        shape = (batch, kv_heads, max_len, head_dim)
        self.keys = torch.empty(shape, device=device, dtype=dtype)
        self.values = torch.empty(shape, device=device, dtype=dtype)
        self.pos = torch.tensor([pos], device=device)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.keys.index_copy_(2, self.pos, key_states)
        self.values.index_copy_(2, self.pos, value_states)
        return self.keys, self.values


# ---- collectives ----------------------------------------------------------------------------

@dataclass
class CollectiveLine:
    what: str
    op: str
    nbytes: int
    axis: str
    count: float
    seconds_each: float
    algorithm: str
    overlappable: bool

    @property
    def seconds(self) -> float:
        return self.count * self.seconds_each


def _collective(fabric, mesh, in_graph, what, op, nbytes, axis, count, overlappable=False):
    est = collective_estimate(op, int(nbytes), group_cores(mesh, axis), fabric, in_graph=in_graph)
    return CollectiveLine(what, op, int(nbytes), axis, count, est.seconds, est.algorithm,
                          overlappable)


def _job(instance, lnc, ranks):
    from .distributed.spmd import job_cores
    nodes, fabric = job_cores(ranks, instance, lnc)
    return get_instance(instance), fabric.lnc, fabric, nodes


# ---- results --------------------------------------------------------------------------------

def _engines_text(engine_ns: dict, scale_s: float = 1e-3) -> str:
    return ", ".join(f"{e} {v / 1e9 / scale_s:.2f}" for e, v in engine_ns.items() if v)


def _collectives_text(lines) -> list:
    return [f"    {c.count:>7g} x {c.what:<28} {c.op:<15} {c.nbytes / 2**20:>9.2f} MiB over "
            f"{c.axis:<4} ({c.algorithm}): {c.seconds_each * 1e6:9.1f} us each, "
            f"{c.seconds * 1e3:9.2f} ms{'  (overlapped)' if c.overlappable else ''}"
            for c in lines]


class _Memory:
    """HBM per logical core of an estimate (hbm_bytes by use, hbm_capacity), the estimate as
    plain data, and the frame of its report."""

    SUMMARY = ()   # the derived figures to_dict adds

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update({k: getattr(self, k) for k in self.SUMMARY + ("hbm_per_core", "fits")})
        return d

    @property
    def hbm_per_core(self) -> int:
        return sum(self.hbm_bytes.values())

    @property
    def fits(self) -> bool:
        return self.hbm_per_core <= self.hbm_capacity

    def _report(self, what: str, options: str, lines: list) -> str:
        """`what` with the precision, the MoE layout, `options` and how it ran; `lines`; HBM per
        core; what an FP8/MX figure must be read with."""
        precision = f", {self.precision} matmuls" if self.precision != "bf16" else ""
        moe = f", {self.moe}" if self.moe else ""
        head = (f"{what}{precision}{moe}{options} ({'compiled' if self.compiled else 'eager'}, "
                f"{'time-only' if self.time_only else 'normal'} execution)")
        hbm = (f"  HBM per core {self.hbm_per_core / 2**30:.2f} of "
               f"{self.hbm_capacity / 2**30:.0f} GiB ({'fits' if self.fits else 'DOES NOT FIT'}): "
               + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in self.hbm_bytes.items()))
        return "\n".join([head, *lines, hbm, *_precision_caution(self.precision)])


@dataclass
class TrainingEstimate(_Memory):
    SUMMARY = ("step_s", "step_serial_s", "compute_s", "tokens_per_s", "mfu", "ranks")

    model: str
    instance: str
    mesh: dict
    lnc: int
    nodes: int
    dtype: str
    seq: int
    micro_batch: int
    grad_accum: int
    compiled: bool
    time_only: bool
    layers: int
    checkpoint: bool
    layer: Measured          # forward + backward of one layer, one micro-batch
    head: Measured           # embedding, final norm, LM head and loss, forward + backward
    optimizer_s: float
    collectives: list = field(default_factory=list)
    hbm_bytes: dict = field(default_factory=dict)
    hbm_capacity: int = 0
    model_flops: float = 0.0
    peak_flops: float = 0.0
    precision: str = "bf16"
    moe: str = ""

    @property
    def ranks(self) -> int:
        return math.prod(self.mesh.values())

    @property
    def compute_s(self) -> float:
        per_mb = _program_ns(self.layer, self.layers, self.head, 2) / 1e9
        return per_mb * self.grad_accum + self.optimizer_s

    @property
    def exposed_comm_s(self) -> float:
        return sum(c.seconds for c in self.collectives if not c.overlappable)

    @property
    def overlapped_comm_s(self) -> float:
        return sum(c.seconds for c in self.collectives if c.overlappable)

    @property
    def step_serial_s(self) -> float:
        return self.compute_s + self.exposed_comm_s + self.overlapped_comm_s

    @property
    def step_s(self) -> float:
        return (self.compute_s + self.exposed_comm_s
                + max(0.0, self.overlapped_comm_s - self.compute_s))

    @property
    def tokens_per_step(self) -> int:
        data_ranks = self.mesh.get("dp", 1) * self.mesh.get("fsdp", 1)
        return self.seq * self.micro_batch * self.grad_accum * data_ranks

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        return (self.model_flops * self.tokens_per_step
                / (self.step_s * self.ranks * self.peak_flops))

    def report(self) -> str:
        mesh = " x ".join(f"{k}{v}" for k, v in self.mesh.items())
        what = (f"{self.model} training on {self.nodes} x {self.instance} (LNC={self.lnc}), "
                f"{self.ranks} ranks {mesh}, {self.dtype}, seq {self.seq}, micro-batch "
                f"{self.micro_batch} x {self.grad_accum} accumulation")
        lines = [f"  step {self.step_s:.3f} s (no overlap: {self.step_serial_s:.3f} s), "
                 f"{self.tokens_per_s:,.0f} tokens/s, MFU {100 * self.mfu:.1f}%",
                 f"  compute {self.compute_s * 1e3:.1f} ms: {self.layers} layers x "
                 f"{_part_ns(self.layer) / 1e6:.3f} ms + head {_part_ns(self.head) / 1e6:.3f} ms "
                 f"per micro-batch, optimizer {self.optimizer_s * 1e3:.2f} ms",
                 f"  engine busy per layer (ms): {_engines_text(self.layer.engine_ns)}",
                 f"  collectives: {self.exposed_comm_s * 1e3:.1f} ms exposed, "
                 f"{self.overlapped_comm_s * 1e3:.1f} ms overlapped with compute"]
        return self._report(what, ", activation checkpointing" if self.checkpoint else "",
                            lines + _collectives_text(self.collectives))


@dataclass
class InferenceEstimate(_Memory):
    SUMMARY = ("ttft_s", "tpot_s", "tokens_per_s", "request_s")

    model: str
    instance: str
    tp: int
    lnc: int
    dtype: str
    batch: int
    input_len: int
    output_len: int
    kv_len: int
    compiled: bool
    time_only: bool
    layers: int
    sequence_parallel: bool
    prefill_layer: Measured
    prefill_head: Measured
    decode_layer: Measured
    decode_head: Measured
    prefill_collectives: list = field(default_factory=list)
    decode_collectives: list = field(default_factory=list)
    hbm_bytes: dict = field(default_factory=dict)
    hbm_capacity: int = 0
    precision: str = "bf16"
    moe: str = ""

    @property
    def ttft_s(self) -> float:
        return (_program_ns(self.prefill_layer, self.layers, self.prefill_head, 1) / 1e9
                + sum(c.seconds for c in self.prefill_collectives))

    @property
    def tpot_s(self) -> float:
        return (_program_ns(self.decode_layer, self.layers, self.decode_head, 1) / 1e9
                + sum(c.seconds for c in self.decode_collectives))

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput: batch tokens per TPOT."""
        return self.batch / self.tpot_s

    @property
    def request_s(self) -> float:
        return self.ttft_s + (self.output_len - 1) * self.tpot_s

    def report(self) -> str:
        pc = sum(c.seconds for c in self.prefill_collectives)
        dc = sum(c.seconds for c in self.decode_collectives)
        what = (f"{self.model} inference on {self.instance} (LNC={self.lnc}), TP{self.tp}, "
                f"{self.dtype}, batch {self.batch}, {self.input_len} in / {self.output_len} out, "
                f"static KV cache of {self.kv_len}")
        lines = [f"  TTFT {self.ttft_s * 1e3:.1f} ms, TPOT {self.tpot_s * 1e3:.2f} ms, "
                 f"{self.tokens_per_s:.1f} tokens/s decode, request {self.request_s:.2f} s",
                 f"  prefill: {self.layers} layers x {_part_ns(self.prefill_layer) / 1e6:.3f} ms "
                 f"+ head {_part_ns(self.prefill_head) / 1e6:.3f} ms + collectives "
                 f"{pc * 1e3:.2f} ms; engine busy per layer (ms): "
                 f"{_engines_text(self.prefill_layer.engine_ns)}"]
        lines += _collectives_text(self.prefill_collectives)
        lines += [f"  decode: {self.layers} layers x {_part_ns(self.decode_layer) / 1e3:.1f} us "
                  f"+ head {_part_ns(self.decode_head) / 1e3:.1f} us + collectives "
                  f"{dc * 1e3:.2f} ms; engine busy per layer (us): "
                  f"{_engines_text(self.decode_layer.engine_ns, 1e-6)}"]
        lines += _collectives_text(self.decode_collectives)
        return self._report(what, ", sequence parallel" if self.sequence_parallel else "", lines)


# ---- the estimates --------------------------------------------------------------------------

def _device():
    return torch.device("neuron", torch.neuron.current_device())


def _setup(cfg, instance, dtype, precision, tp):
    """What a training and an inference estimate both start from, after checking the instance,
    dtype and precision: (torch dtype, precision, bytes per element, dims, parameter counts, one
    TP shard's config)."""
    import torch_neuronx

    from .fp8_linear import check_precision
    inst, here = get_instance(instance), get_instance(torch_neuronx.get_instance())
    if inst.chip.name != here.chip.name:
        raise ValueError(f"estimates for {instance} ({inst.chip.name}) need this process's device "
                         f"on a {inst.chip.name} instance, but it simulates {here.name} "
                         f"({here.chip.name}); call torch_neuronx.set_instance({instance!r}) "
                         "before the device is first used, or set NEURON_SIM_INSTANCE.")
    if str(dtype).lower() not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported by the estimator; use bf16 or fp32 "
                         "(FP8 and MX matmuls: precision='fp8' or 'mx').")
    tdt = DTYPES[str(dtype).lower()]
    prec = check_precision(precision, inst.chip)
    if prec != "bf16" and tdt != torch.bfloat16:
        raise ValueError(f"precision {prec!r} runs the matmuls in FP8 around a BF16 model; give "
                         f"dtype='bf16' (got {tdt}).")
    return (tdt, prec, torch.finfo(tdt).bits // 8, _dims(cfg), parameter_counts(cfg),
            _shard(cfg, tp, prec))


def _peak_dtype(tdt, precision) -> str:
    """The TensorE peak MFU is measured against."""
    if precision != "bf16":
        return {"fp8": "float8_e4m3", "mx": "mxfp8"}[precision]
    return "float32" if tdt == torch.float32 else "bfloat16"


def _precision_caution(precision) -> list[str]:
    """What a reader of an FP8/MX estimate must know before trusting it (docs/estimate.md)."""
    if precision == "bf16":
        return []
    lines = ["  caution: FP8 matmuls are timed with both operands transposed through TensorE on "
             "every call (torch._scaled_mm's K-contiguous layout; DMA transposes only 2-byte "
             "types); a deployment lays FP8 weights out once, so these figures are pessimistic "
             "and FP8 may look slower than BF16 (docs/estimate.md, FP8 and MX)"]
    if precision == "mx":
        lines.append("  caution: MX matmuls are timed at the FP8 rate, not MX's own (an upper "
                     "bound)")
    return lines


def _moe_text(d) -> str:
    """The MoE layout and the routing assumption it was timed with ('' for a dense model)."""
    if not d["experts"]:
        return ""
    from .time_only import moe_routing
    shares = moe_routing(d["experts"])
    routing = ("uniform" if max(shares) - min(shares) < 1e-12
               else "shares " + ",".join(f"{x:.3g}" for x in shares))
    return (f"MoE {d['experts']} experts, top-{d['top_k']}, {routing} routing "
            "(torch_neuronx.set_moe_routing); experts split by TP, no expert parallelism")


def estimate_training(model, instance="trn2.48xlarge", tp=1, fsdp=1, dp=1, lnc=None,
                      dtype="bf16", seq=4096, micro_batch=1, grad_accum=1, compiled=True,
                      checkpoint=False, time_only=None, name=None,
                      precision="bf16") -> TrainingEstimate:
    """Training step of `model` (see load_config) with `dp x fsdp x tp` ranks, one per logical
    core of as many `instance`s as needed. `checkpoint`: activation checkpointing of every layer
    (torch.utils.checkpoint: the layer keeps its input and recomputes its forward in the
    backward). `precision`: 'fp8' or 'mx' (Trn3) runs the layers' linears, forward and
    backward, through torch._scaled_mm with quantisation per call (torch_neuronx.fp8_linear).
    See the module docstring for the method."""
    cfg = load_config(model)
    mesh = {"dp": int(dp), "fsdp": int(fsdp), "tp": int(tp)}
    inst, lnc, fabric, nodes = _job(instance, lnc, math.prod(mesh.values()))
    tdt, prec, elt, d, counts, cfg_tp = _setup(cfg, instance, dtype, precision, mesh["tp"])
    dev = _device()
    vocab_tp = -(-d["vocab"] // mesh["tp"])
    b, s, h = int(micro_batch), int(seq), d["hidden"]
    with _execution(time_only) as is_time_only:
        layer, rope, norm = _layer_parts(cfg_tp, dev, tdt, prec, trainable=True)
        x = torch.empty(b, s, h, device=dev, dtype=tdt, requires_grad=True)
        pos = torch.arange(s, device=dev)[None].expand(b, s)
        gy = torch.empty(b, s, h, device=dev, dtype=tdt)

        def layer_step():
            _layer_forward(layer, rope, x, pos).backward(gy)

        m_layer = _measure(layer_step, dev, _drop_grads(layer, x), compiled)
        if checkpoint:   # the backward recomputes the forward first: one more forward's time
            with torch.no_grad():
                m_layer = m_layer.plus(_measure(lambda: _layer_forward(layer, rope, x, pos),
                                                dev, compiled=compiled))
        saved = _saved_bytes(layer, rope, x, pos, dev, checkpoint)
        del layer
        embed = torch.nn.Embedding(vocab_tp, h, device=dev, dtype=tdt)
        lm_head = torch.nn.Linear(h, vocab_tp, bias=False, device=dev, dtype=tdt)
        ids = torch.zeros(b, s, dtype=torch.long, device=dev)
        labels = torch.zeros(b * s, dtype=torch.long, device=dev)

        def head_step():   # the layers between embedding and norm are timed on their own
            logits = lm_head(norm(embed(ids)))
            torch.nn.functional.cross_entropy(logits.view(b * s, -1).float(), labels).backward()

        m_head = _measure(head_step, dev, _drop_grads(embed, lm_head, norm), compiled)
        del embed, lm_head
        shard = counts["total"] / (mesh["tp"] * mesh["fsdp"])
        opt_s = _optimizer_seconds(shard, dev, tdt)
    coll = _training_collectives(counts, mesh, fabric, d["layers"], b, s, h, elt, grad_accum,
                                 in_graph=m_layer.compiled)
    layer_tp = counts["layer"] / mesh["tp"]
    opt_bytes = 12 if tdt != torch.float32 else 8
    hbm = {"parameters": shard * elt, "gradients": shard * elt, "optimizer": shard * opt_bytes,
           "gathered layers": (2 * layer_tp * elt if mesh["fsdp"] > 1 else 0),
           "activations": saved * d["layers"] + max(m_layer.peak_bytes, m_head.peak_bytes)}
    active = counts["active_layer"] * d["layers"] + counts["final_norm"]   # top-k experts only
    flops_per_token = 6 * active + 6 * d["layers"] * h * s
    return TrainingEstimate(
        model=name or _describe(model), instance=instance,
        mesh=mesh, lnc=lnc, nodes=nodes, dtype=str(dtype), seq=s, micro_batch=b,
        grad_accum=int(grad_accum), compiled=m_layer.compiled, time_only=is_time_only,
        layers=d["layers"], checkpoint=bool(checkpoint), layer=m_layer, head=m_head,
        optimizer_s=opt_s, collectives=coll,
        hbm_bytes={k: int(v) for k, v in hbm.items()},
        hbm_capacity=inst.hbm_bytes_per_logical_core(lnc), model_flops=flops_per_token,
        peak_flops=inst.peak_flops_per_logical_core(_peak_dtype(tdt, prec), lnc),
        precision=prec, moe=_moe_text(d))


def _describe(model) -> str:
    return model if isinstance(model, str) else "model"


def _layer_forward(layer, rope, x, pos, checkpoint=False):
    def run(x):
        y = layer(x, position_ids=pos, position_embeddings=rope(x, pos))
        return y[0] if isinstance(y, tuple) else y
    if checkpoint:
        return torch.utils.checkpoint.checkpoint(run, x, use_reentrant=False)
    return run(x)


def _saved_bytes(layer, rope, x, pos, dev, checkpoint) -> int:
    """Bytes one layer's forward keeps for its backward (allocated after the forward and before
    the backward), eagerly."""
    torch.neuron.synchronize(dev)
    before = torch.neuron.memory_allocated(dev)
    y = _layer_forward(layer, rope, x, pos, checkpoint)
    torch.neuron.synchronize(dev)
    saved = torch.neuron.memory_allocated(dev) - before
    del y
    return max(0, saved)


def _optimizer_seconds(shard_params: float, dev, dtype) -> float:
    """AdamW over this rank's shard: FP32 master weights, m and v (and the copy back to the
    training dtype), timed on min(shard, OPT_CHUNK) parameters and scaled linearly."""
    n = int(min(shard_params, OPT_CHUNK))
    p = torch.zeros(n, device=dev, dtype=torch.float32, requires_grad=True)
    p.grad = torch.zeros(n, device=dev, dtype=torch.float32)
    low = torch.empty(n, device=dev, dtype=dtype) if dtype != torch.float32 else None
    opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)

    def step():
        opt.step()
        if low is not None:
            low.copy_(p.detach())

    return _measure(step, dev).ns / 1e9 * shard_params / n


def _training_collectives(counts, mesh, fabric, layers, b, s, h, elt, grad_accum, in_graph):
    ga = int(grad_accum)
    line = functools.partial(_collective, fabric, mesh, in_graph)
    out = []
    if mesh["tp"] > 1:
        act = b * s * h * elt
        out += [line("TP layer activations", "all_reduce", act, "tp", 4 * layers * ga),
                line("TP embedding", "all_reduce", act, "tp", ga),
                line("TP vocab-parallel loss", "all_reduce", b * s * 4, "tp", 2 * ga)]
    layer_tp = counts["layer"] / mesh["tp"] * elt
    rest_tp = (counts["embed"] + counts["head"] + counts["final_norm"]) / mesh["tp"] * elt
    if mesh["fsdp"] > 1:
        # the first all-gather and the last reduce-scatter cannot hide behind compute
        out += [line("FSDP first all-gather", "all_gather", rest_tp, "fsdp", ga),
                line("FSDP layer all-gather", "all_gather", layer_tp, "fsdp", 2 * layers * ga,
                     overlappable=True),
                line("FSDP layer reduce-scatter", "reduce_scatter", layer_tp, "fsdp", layers - 1,
                     overlappable=True),
                line("FSDP last reduce-scatter", "reduce_scatter", max(layer_tp, rest_tp),
                     "fsdp", 1)]
    if mesh["dp"] > 1:
        shard = counts["total"] / (mesh["tp"] * mesh["fsdp"]) * elt
        buckets = ([DDP_BUCKET_BYTES] * int(shard // DDP_BUCKET_BYTES)
                   + [int(shard % DDP_BUCKET_BYTES)])
        out += [line("DP gradient buckets", "all_reduce", call.nbytes, "dp", call.count,
                     overlappable=True) for call in ddp_pattern(buckets, axis="dp")]
    return out


def estimate_inference(model, instance="trn2.48xlarge", tp=1, lnc=None, dtype="bf16",
                       input_len=1024, output_len=128, batch=1, kv_len=None, compiled=True,
                       sequence_parallel=True, time_only=None, name=None,
                       precision="bf16") -> InferenceEstimate:
    """TTFT and TPOT of `model` at tensor parallelism `tp` with a static KV cache of `kv_len`
    positions (default input_len + output_len). `sequence_parallel` (with tp > 1, as NxD
    Inference runs it): the prefill's norms and residual adds work on input_len / tp tokens per
    rank (the TP all-reduces become reduce-scatters and all-gathers of the same bytes).
    `precision` 'fp8' / 'mx' (Trn3): the layers' linears hold quantised weights (quantised once,
    1 byte per parameter in HBM) and quantise their input on every call
    (torch_neuronx.fp8_linear); the LM head stays BF16. See the module docstring."""
    cfg = load_config(model)
    mesh = {"tp": int(tp)}
    inst, lnc, fabric, _nodes = _job(instance, lnc, mesh["tp"])
    if _nodes > 1:
        raise ValueError(f"TP{tp} needs {_nodes} instances of {instance}; tensor parallelism "
                         f"stays inside one instance ({inst.logical_cores(lnc)} logical cores at "
                         f"LNC={lnc}).")
    tdt, prec, elt, d, counts, cfg_tp = _setup(cfg, instance, dtype, precision, mesh["tp"])
    kv_len = int(kv_len or input_len + output_len)
    b, s, h = int(batch), int(input_len), d["hidden"]
    vocab_tp = -(-d["vocab"] // mesh["tp"])
    dev = _device()
    with _execution(time_only) as is_time_only, torch.no_grad():
        layer, rope, norm = _layer_parts(cfg_tp, dev, tdt, prec)
        lm_head = torch.nn.Linear(h, vocab_tp, bias=False, device=dev, dtype=tdt)
        x = torch.empty(b, s, h, device=dev, dtype=tdt)
        pos = torch.arange(s, device=dev)[None].expand(b, s)

        def head(last):
            return lm_head(norm(last)).argmax(-1)

        m_pre = _measure(lambda: _layer_forward(layer, rope, x, pos), dev, compiled=compiled)
        if sequence_parallel and mesh["tp"] > 1:
            m_pre = _sequence_parallel(m_pre, layer, b, s, h, mesh["tp"], dev, tdt, compiled)
        m_pre_head = _measure(lambda: head(x[:, -1:]), dev, compiled=compiled)
        kv = _StaticKV(b, cfg_tp.num_key_value_heads, kv_len, cfg_tp.head_dim, kv_len - 1, dev,
                       tdt)
        x1 = torch.empty(b, 1, h, device=dev, dtype=tdt)
        pos1 = torch.full((b, 1), kv_len - 1, device=dev, dtype=torch.long)
        mask = torch.ones(b, 1, 1, kv_len, device=dev, dtype=torch.bool)

        def decode():
            return layer(x1, attention_mask=mask, position_ids=pos1, cache=kv,
                         position_embeddings=rope(x1, pos1))

        m_dec = _measure(decode, dev, compiled=compiled)
        m_dec_head = _measure(lambda: head(x1), dev, compiled=compiled)
    line = functools.partial(_collective, fabric, mesh, m_pre.compiled)
    pre, dec = [], []
    for lines, tokens in ((pre, s), (dec, 1)) if mesh["tp"] > 1 else ():
        act = b * tokens * h * elt
        lines += [line("TP layer activations", "all_reduce", act, "tp", 2 * d["layers"]),
                  line("TP embedding", "all_reduce", act, "tp", 1),
                  # on-device sampling: each rank's best token and its logit
                  line("TP sampling (argmax)", "all_gather", b * 8 * mesh["tp"], "tp", 1)]
    weights = counts["total"] / mesh["tp"] * elt
    if prec != "bf16":     # the layers' linear weights at one byte (the scales are negligible)
        weights -= d["layers"] * (counts["layer"] - 2 * h) / mesh["tp"] * (elt - 1)
    kv_bytes = 2 * d["layers"] * b * cfg_tp.num_key_value_heads * cfg_tp.head_dim * kv_len * elt
    hbm = {"weights": int(weights), "KV cache": int(kv_bytes),
           "prefill activations": int(m_pre.peak_bytes)}
    return InferenceEstimate(
        model=name or _describe(model), instance=instance, tp=mesh["tp"], lnc=lnc,
        dtype=str(dtype), batch=b, input_len=s, output_len=int(output_len), kv_len=kv_len,
        compiled=m_pre.compiled, time_only=is_time_only, layers=d["layers"],
        sequence_parallel=bool(sequence_parallel and mesh["tp"] > 1),
        prefill_layer=m_pre, prefill_head=m_pre_head, decode_layer=m_dec,
        decode_head=m_dec_head, prefill_collectives=pre, decode_collectives=dec, hbm_bytes=hbm,
        hbm_capacity=inst.hbm_bytes_per_logical_core(lnc), precision=prec, moe=_moe_text(d))


# ---- the published figures (calibration predict rows) --------------------------------------

def llm_targets() -> list:
    """The published LLM figures of neuron_sim/calibrate/public.json (ids L*, T*)."""
    from neuron_sim.calibrate import published
    return [t for t in published().values() if t.get("kind") in ("inference", "training")]


def _target_rows(t) -> list:
    from neuron_sim.calibrate import Row
    c, res, hw = dict(t["config"]), t["result"], t["instance"]
    if t.get("not_expressible"):
        return [Row(t["id"], m, hw, v, float("nan"), asserted=False, note=t["not_expressible"])
                for m, v in res.items()]
    if t["kind"] == "inference":
        e = estimate_inference(t["model"], hw, tp=c["tp"], lnc=c.get("lnc"), dtype=c["dtype"],
                               input_len=c["input_len"], output_len=c["output_len"],
                               batch=c["batch"], kv_len=c.get("kv_len"), name=t["model"])
        got = {"ttft_ms": e.ttft_s * 1e3, "tpot_ms": e.tpot_s * 1e3,
               "request_output_tokens_per_s": e.output_len / e.request_s}
    else:
        e = estimate_training(t["model"], hw, tp=c.get("tp", 1), fsdp=c.get("fsdp", 1),
                              dp=c.get("dp", 1), lnc=c.get("lnc"), dtype=c["dtype"],
                              seq=c["seq"], micro_batch=c["micro_batch"],
                              grad_accum=c.get("grad_accum", 1), name=t["model"])
        got = {"seq_per_s": e.tokens_per_step / e.seq / e.step_s}
    note = (f"{t['model']} {'TP' + str(c['tp']) if 'tp' in c else ''}; "
            f"{'time-only' if e.time_only else 'normal'}, {'compiled' if e.compiled else 'eager'}")
    return [Row(t["id"], m, hw, v, float(got[m]), note=note) for m, v in res.items()]


def calibration_rows(ids=None) -> list:
    """One predict row per published LLM figure (never fitted). Targets on another chip than
    this process's device run in a child process simulating their instance."""
    import os
    import subprocess
    import sys

    import torch_neuronx
    from neuron_sim.calibrate import Row
    here = get_instance(torch_neuronx.get_instance()).chip.name
    rows = []
    for t in llm_targets():
        if ids and t["id"] not in ids:
            continue
        if t.get("not_expressible") or get_instance(t["instance"]).chip.name == here:
            rows += _target_rows(t)
            continue
        env = dict(os.environ, NEURON_SIM_INSTANCE=t["instance"])
        out = subprocess.run([sys.executable, "-m", "torch_neuronx.estimate", "--rows", t["id"]],
                             env=env, capture_output=True, text=True, check=False)
        if out.returncode:
            raise RuntimeError(f"estimating {t['id']} on {t['instance']} failed:\n{out.stderr}")
        rows += [Row(**r) for r in json.loads(out.stdout.strip().splitlines()[-1])]
    return rows


if __name__ == "__main__":   # python -m torch_neuronx.estimate --rows ID: one target's rows, JSON
    import sys
    if sys.argv[1:2] != ["--rows"] or len(sys.argv) != 3:
        sys.exit("usage: python -m torch_neuronx.estimate --rows TARGET_ID")
    target = next(t for t in llm_targets() if t["id"] == sys.argv[2])
    print(json.dumps([asdict(r) for r in _target_rows(target)]))

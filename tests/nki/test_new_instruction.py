"""Adding an instruction is its ISA module and one registry line (issue 12,
neuron_sim/isa/README.md): a module written outside the tree and registered by that one line is,
with nothing else edited, a `nisa.<name>` call (checked at the kernel's line), costed in the NKI
program, run by the interpreter (`check_semantics=True` compares it with the traced kernel) and
known to be pure."""

import os
import subprocess
import sys
import textwrap

# The module: what isa/vector/max8.py holds, for dst = -src on VectorE, one cycle per element.
_NEGATE = '''
import numpy as np
from neuron_sim.engines import Engine
from neuron_sim.errors import FreeSizeError
from neuron_sim.isa.common import READ, WRITE, access_latency, check_operands, make, semantics_of

NAME = "negate"
PURE = True
OPERANDS = {"dst": WRITE, "src": READ}


def build(chip, dst, src):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, src=src)
    if dst.shape != src.shape:
        raise FreeSizeError(NAME, "dst", f"src's shape {list(src.shape)}", list(dst.shape),
                            chip.name)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, src.free_size),
                access_latency(chip, 2), (src,), (dst,))


def reference(x):
    return -x.astype(np.float32)


semantics = semantics_of(reference)
'''

_USE = '''
import sys
import numpy as np
import neuron_sim.isa as isa
isa.__path__.append(sys.argv[1])
sys.path.insert(0, sys.argv[2])                      # tests/nki: nki_helpers
isa._MODULES["negate"] = "extra.negate"            # the one registry line

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.hardware import get_chip
from nki_helpers import to_hbm


@nki.jit
def kernel(x):
    a = nl.load(x)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.negate(dst=o, src=a)
    return to_hbm(o)[0]


@nki.jit
def wrong(x):
    a = nl.load(x)
    o = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.negate(dst=o, src=a)                         # KERNEL LINE
    return x


x = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)
out = nki.simulate(kernel, platform_target="trn2", check_semantics=True)(x)
np.testing.assert_array_equal(out, -x)
rep = nki.last_report()
assert not [f for f in rep.findings if f.kind == "semantics check"]
rows = [e.ii_cycles for e in rep.programs[0].emits if e.name == "negate"]
assert rows == [max(get_chip("trn2").min_ii_cycles, 512)], rows
assert "negate" in isa.pure_instructions()
try:
    nki.simulate(wrong, platform_target="trn2")(x)
except nki.NkiValidationError as e:
    assert "src's shape [128, 512]" in str(e) and "nisa.negate" in str(e), e
    assert e.loc[1] == [n for n, line in enumerate(open(__file__), 1) if "KERNEL LINE" in line][0]
else:
    raise AssertionError("a wrong dst shape must be refused")
print("negate: ok")
'''


def test_a_module_and_its_registry_line_make_a_working_instruction(tmp_path):
    pkg = tmp_path / "extra"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "negate.py").write_text(textwrap.dedent(_NEGATE))
    script = tmp_path / "use_negate.py"
    script.write_text(_USE)
    run = subprocess.run([sys.executable, str(script), str(tmp_path), os.path.dirname(__file__)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "negate: ok" in run.stdout

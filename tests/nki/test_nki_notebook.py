"""notebooks/03_nki_kernels.ipynb runs top to bottom (its cells are executed in order, without
a Jupyter kernel, so the test needs nothing beyond the simulator)."""

import json
import os

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "..", "notebooks", "03_nki_kernels.ipynb")


def test_nki_notebook_runs(capsys, monkeypatch):
    monkeypatch.chdir(os.path.dirname(NOTEBOOK))
    nb = json.load(open(NOTEBOOK))
    ns = {"__name__": "__main__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"<03_nki_kernels cell {i}>", "exec"), ns)
    out = capsys.readouterr().out
    assert "NkiCapacityError: <03_nki_kernels cell 11>:13: nisa.nc_matmul" in out      # the error points at the kernel line
    assert "PSUM is full" in out and "spills:" in out

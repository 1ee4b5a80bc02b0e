"""The neuron-sim command line prints the hardware data."""

from neuron_sim import cli


def test_instances_and_chips(capsys):
    assert cli.main(["instances"]) == 0
    out = capsys.readouterr().out
    assert "trn2.48xlarge" in out and "24.0" in out
    assert cli.main(["chips"]) == 0
    assert "has_mx_matmul" in capsys.readouterr().out
    assert cli.main(["assumptions"]) == 0
    assert "hbm_bytes_per_s_per_core" in capsys.readouterr().out

"""ScalarE: ``activation_reduce``, NKI's name for an activation whose row reduction is reset and
read out. ``nisa.activation`` itself is made from its ISA module (_generic.py)."""

from __future__ import annotations

from ._generic import adapter
from .enums import reduce_cmd

_activation_reduce = adapter("activation_reduce")     # the activation module, under this name


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    _activation_reduce(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                       reduce_res=reduce_res, reduce_cmd=reduce_cmd.reset_reduce, name=name)

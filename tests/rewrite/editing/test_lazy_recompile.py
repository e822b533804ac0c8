"""A rewritten GraphModule regenerates its Python code on first use, and behaves as if recompiled."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite import eliminate_clones
from rewrite.editing.recompile import recompile_lazily


def _rewritten() -> torch.fx.GraphModule:
    gm = make_fx(lambda x: x.clone() * 2)(torch.ones(3))
    assert eliminate_clones(gm).removed == ("clone",)
    assert "_code" not in gm.__dict__  # not generated yet
    return gm


def test_call_generates_the_new_code() -> None:
    gm = _rewritten()
    assert gm(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert "clone" not in gm.__dict__["_code"]
    assert gm(torch.full((3,), 2.0)).tolist() == [4.0, 4.0, 4.0]  # the real forward from now on


def test_code_str_print_readable_copy_and_pickle_see_the_rewrite() -> None:
    for use in (
        lambda gm: gm.code,
        str,
        lambda gm: gm.print_readable(print_output=False),
        lambda gm: copy.deepcopy(gm).code,
        lambda gm: pickle.loads(pickle.dumps(gm)).code,
    ):
        text = use(_rewritten())
        assert "mul" in text and "clone" not in text


def test_other_graph_modules_are_untouched() -> None:
    other = make_fx(lambda x: x.clone() + 1)(torch.ones(2))
    _rewritten()
    assert "_code" in other.__dict__ and "clone" in other.code


def test_exported_program_runs_and_saves(tmp_path: Path) -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.clone() + 1

    ep = torch.export.export(M(), (torch.randn(2),))
    assert eliminate_clones(ep).removed == ("clone",)
    assert ep.module()(torch.ones(2)).tolist() == [2.0, 2.0]
    torch.export.save(ep, tmp_path / "ep.pt2")
    assert torch.export.load(tmp_path / "ep.pt2").module()(torch.ones(2)).tolist() == [2.0, 2.0]


def test_a_second_rewrite_marks_it_stale_again() -> None:
    gm = _rewritten()
    gm(torch.ones(3))
    mul = next(n for n in gm.graph.nodes if n.name == "mul")
    mul.args = (mul.args[0], 3)
    recompile_lazily(gm)
    assert gm(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]

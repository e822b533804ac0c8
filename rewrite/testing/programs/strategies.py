"""The Hypothesis strategy of random programs (:func:`programs`), and a fixed sample of it (:func:`sample_programs`).

A program is drawn as its inputs (shapes, layouts, donation, a seed for the
values), a random subset of the statement kinds (swarm testing), then one
span per statement with a stop flag before each, so that Hypothesis shrinks a
program by deleting statements, and finally its outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import InvalidArgument

from rewrite.testing.programs.builder import KINDS, ProgramBuilder
from rewrite.testing.programs.inputs import draw_inputs, make_inputs_source
from rewrite.testing.programs.norms import NORM_CALLS
from rewrite.testing.programs.profiles import hypothesis_tracer_paused
from rewrite.testing.programs.program import TRACING_MODES, Program, load_functions

__all__ = ["finish_program", "programs", "sample_programs"]

_MORE = st.integers(0, 19)  # 0 stops
_ENABLED = st.integers(0, 3)  # 0 disables a statement kind in one program


@st.composite
def _statement(draw: st.DrawFn, builder: ProgramBuilder) -> None:
    builder.step(draw)


@st.composite
def _programs(
    draw: st.DrawFn,
    *,
    min_ops: int,
    max_ops: int,
    max_inputs: int,
    max_outputs: int,
    max_size: int,
    alias_bias: float,
    allow_custom_ops: bool,
    allow_donation: bool,
    allow_hidden_effects: bool,
    tracing_mode: str = "fake",
    allow_untrusted_ops: bool = False,
) -> Program:
    with hypothesis_tracer_paused():  # the fuzzer's own work: only the pass under test is traced
        seed = draw(st.integers(0, 2**31 - 1))
        specs, donated = draw_inputs(draw, max_inputs=max_inputs, max_size=max_size, allow_donation=allow_donation)
        inputs_source = make_inputs_source(specs, seed)
        # Swarm testing: each program uses a random subset of the statement kinds (clones always).
        kinds = [
            (kind, weight)
            for kind, weight in KINDS
            if kind == "clone"
            or (
                (kind != "custom" or allow_custom_ops)
                and (kind != "norm" or (allow_hidden_effects and NORM_CALLS))
                and draw(_ENABLED) != 0
            )
        ]
        builder = ProgramBuilder(
            draw,
            inputs_source=inputs_source,
            num_inputs=len(specs),
            alias_bias=alias_bias,
            kinds=kinds,
            max_size=max_size,
            max_lines=max_ops,
            allow_hidden_effects=allow_hidden_effects,
            allow_untrusted_ops=allow_untrusted_ops,
        )
        # One span per statement and a stop flag before each (shrinks toward 0: stop), so that
        # Hypothesis shrinks a program by deleting statements.
        attempts = 0
        while len(builder.lines) < max_ops and attempts < 3 * max_ops + 8:
            if len(builder.lines) >= min_ops and draw(_MORE) == 0:
                break
            attempts += 1
            draw(_statement(builder))
        outputs = builder.outputs(draw, max_outputs)
        return finish_program(builder, outputs, donated=donated, seed=seed, tracing_mode=tracing_mode)


def finish_program(
    builder: ProgramBuilder, outputs: Sequence[str], *, donated: tuple[int, ...], seed: int, tracing_mode: str = "fake"
) -> Program:
    """The program of ``builder``'s statements, returning ``outputs``."""
    params = ", ".join(builder.input_names)
    body = [f"    {line}" for line in builder.lines]
    body.append(f"    return ({outputs[0]},)" if len(outputs) == 1 else f"    return ({', '.join(outputs)})")
    function_source = f"def program({params}):\n" + "\n".join(body) + "\n"
    try:
        return Program(
            function_source=function_source,
            inputs_source=builder.inputs_source,
            donated_inputs=donated,
            seed=seed,
            num_ops=len(builder.lines),
            uses_custom_ops=builder.uses_custom_ops,
            tracing_mode=tracing_mode,
        )
    except Exception:
        if not _runs_eagerly(function_source, builder.inputs_source):
            raise  # a program the builder should never have made
        # Every statement ran eagerly as it was drawn, but torch's tracer cannot trace the
        # program: a fake kernel lays a result out otherwise than the eager one and a later
        # view of it fails only under the trace (native_batch_norm of a transposed input,
        # then a clone and view(-1)). No pass is ever given such a graph: draw another.
        reject()


def _runs_eagerly(function_source: str, inputs_source: str) -> bool:
    try:
        fn, make_inputs = load_functions(function_source, inputs_source)
        fn(*make_inputs())
    except Exception:
        return False
    return True


def _check_int(name: str, value: object, lo: int, hi: float = math.inf) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an int")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{name}={value!r} must be in [{lo}, {hi}]")
    return value


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be a bool")
    return value


def programs(
    *,
    min_ops: int = 2,
    max_ops: int = 10,
    max_inputs: int = 3,
    max_outputs: int = 3,
    max_size: int = 6,
    alias_bias: float = 0.75,
    allow_custom_ops: bool = True,
    allow_donation: bool = True,
    allow_hidden_effects: bool = True,
    tracing_mode: str = "fake",
    allow_untrusted_ops: bool = False,
) -> st.SearchStrategy[Program]:
    """A Hypothesis strategy of random straight-line programs full of views, writes and clones.

    Parameters
    ----------
    min_ops, max_ops : int
        Bounds on the statements in the function body (``0 <= min_ops <= max_ops <= 200``).
        A statement that turns out invalid on real tensors is dropped, so a
        program can have fewer than ``min_ops`` statements in rare cases.
    max_inputs : int
        At most this many tensor inputs (1 to 8), each of rank 1 to 4, contiguous,
        transposed, strided (``[..., ::2]``) or with a storage offset (``[1:]``).
    max_outputs : int
        At most this many outputs (1 to 8); outputs may repeat and may be views.
    max_size : int
        Largest size of any input dimension (1 to 16).
    alias_bias : float
        Probability (0 to 1) of picking an operand among values that share a
        storage with a clone or a clone's original, when there are any.
    allow_custom_ops : bool
        Draw the fuzzer's custom ops (``fxa_fuzz::mutate_two`` writes two
        arguments, ``fxa_fuzz::first_half`` returns a view).
    allow_donation : bool
        Mark some inputs as donated.
    allow_hidden_effects : bool
        Draw ops whose effects their schemas do not declare
        (:data:`aliasing.core.ops.HIDDEN_EFFECTS`): ``batch_norm`` and
        ``instance_norm`` with running statistics, in train mode (they update
        the statistics in place) and eval mode, and ``_unsafe_view``.
    tracing_mode : str
        How each program's graph is traced (:data:`rewrite.testing.programs.program.TRACING_MODES`):
        ``"fake"`` (the default), ``"symbolic"`` (sizes become SymInts, as
        in a dynamic-shape compile), ``"real"`` (``make_fx`` in real mode) or
        ``"export-save-load"`` (``torch.export``, saved and loaded again: every
        value in a fake storage of its own, as in a program loaded from its file) or
        ``"export-dynamic"`` (``torch.export`` with every size dynamic, checked at the
        sizes' boundaries too: :attr:`Program.input_sets`).
    allow_untrusted_ops : bool
        Also draw the views whose evidence the analysis must not take on trust: dtype
        views (``x.view(torch.int32)``, anywhere in a chain of views), ops whose schemas
        declare a fresh result but that return their argument or a view of it
        (``einsum``, ``atleast_2d``, ``sum_to_size``, ``broadcast_tensors``,
        ``conj_physical``, ``to_dense``, ``dequantize``, ``cartesian_prod``) and
        ``unsafe_split``/``unsafe_chunk``, which return views their schemas do not
        declare. Off by default, so that the programs of a seed stay those of earlier
        releases (the precision benchmark's); the soak turns it on (``--untrusted-ops``).

    Returns
    -------
    hypothesis.strategies.SearchStrategy[Program]

    Raises
    ------
    hypothesis.errors.InvalidArgument
        For arguments of the wrong type or out of range.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> from rewrite.testing import check_pass
    >>> def my_pass(gm):  # a (sound) pass that does nothing
    ...     return gm
    >>> @settings(max_examples=5, deadline=None, database=None)
    ... @given(programs(max_ops=6))
    ... def test_my_pass(program):
    ...     check_pass(my_pass, program)
    >>> test_my_pass()
    """
    _check_int("min_ops", min_ops, 0, 200)
    _check_int("max_ops", max_ops, 0, 200)
    if min_ops > max_ops:
        raise InvalidArgument(f"min_ops={min_ops} must not exceed max_ops={max_ops}")
    _check_int("max_inputs", max_inputs, 1, 8)
    _check_int("max_outputs", max_outputs, 1, 8)
    _check_int("max_size", max_size, 1, 16)
    if isinstance(alias_bias, bool) or not isinstance(alias_bias, (int, float)) or not 0 <= alias_bias <= 1:
        raise InvalidArgument(f"alias_bias={alias_bias!r} must be a number in [0, 1]")
    _check_bool("allow_custom_ops", allow_custom_ops)
    _check_bool("allow_donation", allow_donation)
    _check_bool("allow_hidden_effects", allow_hidden_effects)
    _check_bool("allow_untrusted_ops", allow_untrusted_ops)
    if tracing_mode not in TRACING_MODES:
        raise InvalidArgument(f"tracing_mode={tracing_mode!r} must be one of {', '.join(map(repr, TRACING_MODES))}")
    return _programs(
        min_ops=min_ops,
        max_ops=max_ops,
        max_inputs=max_inputs,
        max_outputs=max_outputs,
        max_size=max_size,
        alias_bias=float(alias_bias),
        allow_custom_ops=allow_custom_ops,
        allow_donation=allow_donation,
        allow_hidden_effects=allow_hidden_effects,
        tracing_mode=tracing_mode,
        allow_untrusted_ops=allow_untrusted_ops,
    )


def sample_programs(count: int, *, seed: int = 0, **strategy: Any) -> list[Program]:
    """``count`` programs drawn from :func:`programs` (``strategy`` are its arguments).

    Examples
    --------
    >>> len(sample_programs(2, seed=3, max_ops=3))
    2
    """
    drawn: list[Program] = []
    for round_ in range(1 + count // 10):  # Hypothesis may draw fewer examples than asked for
        if len(drawn) >= count:
            break

        @hypothesis_seed(seed * 1000 + round_)
        @settings(
            max_examples=count - len(drawn),
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(programs(**strategy))
        def collect(program: Program) -> None:
            if len(drawn) < count:
                drawn.append(program)

        collect()
    return drawn

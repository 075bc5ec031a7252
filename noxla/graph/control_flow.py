"""``tf.while_loop`` and ``tf.cond`` on the graph: each body recorded as a sub-graph (``core.Function``:
``_Arg`` nodes, its nodes, the tensors it returns), the loop or conditional one StatelessWhile or
StatelessIf node that names its bodies, as TF 2's ``while_v2``/``cond_v2`` write them. A tensor of the
enclosing graph that a body reads is captured (``Graph.captured``): an extra input of the node, passed
through a loop's body unchanged; a captured Const is copied into the body instead."""
from __future__ import annotations

from noxla.graph import ops
from noxla.graph.convert import convert_to_tensor
from noxla.graph.core import Function, Graph, Tensor
from noxla.graph.dtypes import Uncovered


def _root(graph: Graph) -> Graph:
    while graph.outer is not None:
        graph = graph.outer
    return graph


def _shapes_attr(tensors) -> dict:
    return {"list": {"shape": [{"dim": [{"size": str(-1 if d is None else d)} for d in t.shape.dims]}
                               if t.shape.dims else {}
                               for t in tensors]}}


def _func(function: Function) -> dict:
    return {"func": {"name": function.name}}


def _record(outer: Graph, fn, args: list[Tensor]) -> tuple[Graph, list[Tensor], list, object]:
    """``fn`` recorded in a new body of ``outer`` on fresh ``_Arg``s like ``args``; its flat results and structure."""
    body = Graph(outer)
    params = [body.arg(t.dtype, t.shape.dims) for t in args]
    with ops.recording(body):
        results = fn(*params)
        structure = results
        flat = list(results) if isinstance(results, (list, tuple)) else [results]
        flat = [convert_to_tensor(r) for r in flat]
        flat = [body.captured(r) for r in flat]  # a body may return an outer tensor or Const as it is
    return body, params, flat, structure


def _function(outer: Graph, kind: str, body: Graph, params, rets, captured) -> Function:
    """The body with an argument for every capture of ``captured`` (in that order) after ``params``."""
    mine = {(id(o.node), o.index): arg for o, arg in body.captures}
    body_args = params + [mine[(id(c.node), c.index)] if (id(c.node), c.index) in mine else body.captured(c)
                          for c in captured]
    for index, arg in enumerate(body_args):
        arg.node.attrs["index"] = ops.int_attr(index)
    return Function(_root(outer).unique_name(kind).replace("/", "_"), body, body_args, rets)  # no / in a name


def _union(*bodies: Graph) -> list[Tensor]:
    seen, out = set(), []
    for body in bodies:
        for outer, _ in body.captures:
            if (id(outer.node), outer.index) not in seen:
                seen.add((id(outer.node), outer.index))
                out.append(outer)
    return out


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, maximum_iterations=None, name=None):
    if maximum_iterations is not None:
        raise Uncovered("tf.while_loop with maximum_iterations")
    outer = ops.current()
    single = not isinstance(loop_vars, (list, tuple))
    init = [convert_to_tensor(v) for v in ([loop_vars] if single else loop_vars)]
    for t, invariant in zip(init, shape_invariants or []):
        dims = getattr(invariant, "dims", invariant)
        if dims is None or tuple(dims) != t.shape.dims:
            raise Uncovered("tf.while_loop with a loop variable whose shape changes")
    body_graph, body_params, outs, _ = _record(outer, body, init)
    if len(outs) != len(init) or any(o.dtype != t.dtype or o.shape.dims != t.shape.dims for o, t in zip(outs, init)):
        raise Uncovered("tf.while_loop whose body changes a loop variable's dtype or shape")
    cond_graph, cond_params, pred, _ = _record(outer, cond, init)
    if len(pred) != 1 or not pred[0].dtype.is_bool or pred[0].shape.dims != ():
        raise Uncovered("tf.while_loop with a condition that is no boolean scalar")
    captured = _union(body_graph, cond_graph)
    cond_fn = _function(outer, "while_cond", cond_graph, cond_params, pred, captured)
    body_fn = _function(outer, "while_body", body_graph, body_params, [], captured)
    body_fn.rets = outs + body_fn.args[len(init):]  # the captures pass through
    inputs = init + captured
    node = outer.add("StatelessWhile", inputs, {
        "T": ops.types_attr([t.dtype for t in inputs]), "cond": _func(cond_fn), "body": _func(body_fn),
        "output_shapes": _shapes_attr(inputs), "parallel_iterations": ops.int_attr(parallel_iterations)},
        [(t.dtype, t.shape.dims) for t in inputs], name=name or "while")
    node.functions = {"cond": cond_fn, "body": body_fn}
    results = [node.output(i) for i in range(len(init))]
    return results[0] if single else results


def cond(pred, true_fn=None, false_fn=None, name=None):
    outer = ops.current()
    pred = convert_to_tensor(pred)
    if not pred.dtype.is_bool or pred.shape.dims != ():
        raise Uncovered("tf.cond with a predicate that is no boolean scalar")
    then_graph, _, then_outs, structure = _record(outer, true_fn, [])
    else_graph, _, else_outs, _ = _record(outer, false_fn, [])
    if not then_outs or len(then_outs) != len(else_outs) or any(
            a.dtype != b.dtype or a.shape.dims != b.shape.dims for a, b in zip(then_outs, else_outs)):
        raise Uncovered("tf.cond whose branches return different dtypes or shapes")
    captured = _union(then_graph, else_graph)
    then_fn = _function(outer, "cond_true", then_graph, [], then_outs, captured)
    else_fn = _function(outer, "cond_false", else_graph, [], else_outs, captured)
    node = outer.add("StatelessIf", [pred, *captured], {
        "Tcond": ops.type_attr(pred.dtype), "Tin": ops.types_attr([t.dtype for t in captured]),
        "Tout": ops.types_attr([t.dtype for t in then_outs]), "then_branch": _func(then_fn),
        "else_branch": _func(else_fn), "output_shapes": _shapes_attr(then_outs)},
        [(t.dtype, t.shape.dims) for t in then_outs], name=name or "cond")
    node.functions = {"then_branch": then_fn, "else_branch": else_fn}
    results = [node.output(i) for i in range(len(then_outs))]
    if isinstance(structure, (list, tuple)):
        return type(structure)(results) if isinstance(structure, list) else tuple(results)
    return results[0]

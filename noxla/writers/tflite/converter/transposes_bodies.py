"""The loop and branch bodies ``noxla.writers.tflite.converter.transposes`` moves transposes in, with what the moves
read: which of a body's arguments are constants, and the shapes of its tensors.

The converter sinks a constant that a While passes through its body unchanged (JAX hoists a body's
array constants into loop-invariant operands) into the body, where it is a constant again, and then
moves a transpose behind an op reading it as it does in the main graph: ``jnp.ones((3, 3)) - x.T`` in a
``while_loop`` body ran as ``x.T - jnp.ones((3, 3))``, also in a loop nested in another loop's body.
An argument counts as a constant here where every call passes a constant (a While's only when its body
returns the argument unchanged, as the converter requires); shapes come from TF's shape inference on
the body, its arguments shaped as the caller's ``_output_shapes`` attributes say.
"""
from __future__ import annotations

from noxla.writers.tflite.converter.transpose_moves import Scope, constant_nodes, node_name, static_shape

# Calling op -> (its function attributes, how many of its inputs precede the callee's arguments).
_CALLS = {"While": (("body", "cond"), 0), "StatelessWhile": (("body", "cond"), 0),
          "If": (("then_branch", "else_branch"), 1), "StatelessIf": (("then_branch", "else_branch"), 1),
          "Case": (("branches",), 1), "StatelessCase": (("branches",), 1),
          "PartitionedCall": (("f",), 0), "StatefulPartitionedCall": (("f",), 0)}


def body_scopes(graph_def, main_constant: set, may_swap):
    """A ``Scope`` for each library function where ``may_swap(its nodes, its constants)`` holds."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    if not functions:
        return
    sites = _call_sites(graph_def, functions)
    constants: dict = {None: main_constant}

    def constant_in(name):
        if name not in constants:
            given = _constant_args(name, functions, sites, constant_in)
            constants[name] = constant_nodes(functions[name].node_def, given=given)
        return constants[name]

    for name, function in functions.items():
        constant = constant_in(name)
        if may_swap(function.node_def, constant) and any(n.op == "Transpose" for n in function.node_def):
            yield Scope(function.node_def, _body_shapes(function, graph_def.library), constant, function)


def _call_sites(graph_def, functions) -> dict:
    """Function name -> [(the calling scope: None for the main graph, else a function name), the node
    calling it, where its arguments start among the node's inputs, whether it is a While's)]."""
    sites: dict = {}
    scopes = [(None, graph_def.node), *((name, f.node_def) for name, f in functions.items())]
    for caller, nodes in scopes:
        for node in nodes:
            attrs, offset = _CALLS.get(node.op, ((), 0))
            for attr in attrs:
                value = node.attr[attr]
                for callee in [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]:
                    if callee in functions:
                        sites.setdefault(callee, []).append((caller, node, offset, node.op.endswith("While")))
    return sites


def _constant_args(name: str, functions, sites, constant_in) -> set[str]:
    """The arguments of the function ``name`` that every call passes a constant (a While's only where
    its body returns the argument unchanged: the converter sinks no other)."""
    args = [a.name for a in functions[name].signature.input_arg]
    given = None
    for caller, node, offset, loop in sites.get(name, ()):
        data = [i for i in node.input if not i.startswith("^")][offset:]
        caller_constant = constant_in(caller)
        here = {arg for arg, i in zip(args, data) if node_name(i) in caller_constant}
        if loop:  # the converter sinks only what the body returns unchanged
            kept = _passed_through(functions.get(node.attr["body"].func.name))
            here = {arg for k, arg in enumerate(args) if arg in here and k in kept}
        given = here if given is None else given & here
    return given or set()


def _passed_through(body) -> set[int]:
    """The positions of the While body ``body``'s arguments that it returns unchanged."""
    if body is None:
        return set()
    inputs = [a.name for a in body.signature.input_arg]
    return {k for k, out in enumerate(body.signature.output_arg) if k < len(inputs) and body.ret[out.name] == inputs[k]}


def _body_shapes(function, library) -> dict:
    """Input name as the body names it (``arg``, ``node:z:0``) -> static shape, by TF's shape inference
    with the arguments shaped by their ``_output_shapes`` attributes."""
    import tensorflow as tf
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def
    shapes = []
    for k in range(len(function.signature.input_arg)):
        listed = function.arg_attr[k].attr["_output_shapes"].list.shape if k in function.arg_attr else []
        shapes.append(tf.TensorShape(listed[0]) if len(listed) == 1 else None)
    graph_def, flat = function_def_to_graph_def(function, shapes)
    graph_def.library.CopyFrom(library)  # a nested loop's bodies
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return {nested: static_shape(graph.get_tensor_by_name(name)) for nested, name in flat.items()
            if not name.startswith("^")}  # control outputs name an op

"""The bookkeeping that makes chapter 6's wrappers drop-ins for torch's DDP.

Used in: chapter 6.

Three helpers, kept apart from the wrappers so that their listings show the
algorithm and not the plumbing:

* :func:`hook_parameters` registers a wrapper's gradient hooks so that they
  live exactly as long as the wrapper: each hook holds the wrapper only
  weakly, the hooks are removed when the wrapper is garbage-collected, and a
  new wrapper over the same module (a notebook cell run twice) takes the
  module over and retires the old one. Torch's DDP keeps its hooks in its
  reducer, with the same effect;
* :func:`in_backward` tells a forward pass that is a recomputation inside
  backward (``torch.utils.checkpoint``) from one that begins a step;
* :func:`reachable_parameters` walks the autograd graph from a forward pass's
  outputs, as torch's DDP does with ``find_unused_parameters=True``, to learn
  which parameters backward can reach.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

__all__ = ["hook_parameters", "in_backward", "reachable_parameters"]

_OWNER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> ref to its wrapper


def hook_parameters(
    wrapper: nn.Module, named: Sequence[tuple[str, nn.Parameter]], method: Callable
) -> list:
    """Call ``method(name, p)`` when each ``p``'s gradient is accumulated, while ``wrapper`` lives.

    ``wrapper.module`` is the wrapped module: a wrapper already over it gets
    its ``release()`` called first (its hooks are removed). Returns the
    removable handles.
    """
    old = _OWNER.get(wrapper.module)
    if old is not None and old() is not None and old() is not wrapper:
        old().release()
    ref = weakref.WeakMethod(method)  # the parameters do not keep it alive

    def hook(name: str, p: torch.Tensor) -> None:
        bound = ref()
        if bound is not None:
            bound(name, p)

    handles = [p.register_post_accumulate_grad_hook(partial(hook, name)) for name, p in named]
    weakref.finalize(wrapper, _remove, handles)
    _OWNER[wrapper.module] = weakref.ref(wrapper)
    return handles


def _remove(handles: list) -> None:
    for handle in handles:
        handle.remove()  # removing twice is harmless


def in_backward() -> bool:
    """Whether autograd is running a backward pass in this thread now."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def reachable_parameters(outputs) -> set[int]:
    """``id`` of every leaf tensor that backward from ``outputs`` can reach.

    ``outputs`` may be a tensor or any nesting of lists, tuples, dicts and
    dataclasses of them (what torch's DDP searches, ``_find_tensors``). An
    empty set when no output has a gradient function (nothing to walk).
    """
    tensors = output_tensors(outputs)
    found = {id(t) for t in tensors if t.requires_grad and t.grad_fn is None}
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen = set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        variable = getattr(fn, "variable", None)  # an AccumulateGrad node: a leaf
        if variable is not None:
            found.add(id(variable))
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    return found


def output_tensors(outputs) -> list[torch.Tensor]:
    """Every tensor in ``outputs``: a tensor, or any nesting of lists, tuples, dicts and
    dataclasses of them (a dataclass is no pytree node, but torch's DDP looks inside)."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if dataclasses.is_dataclass(outputs) and not isinstance(outputs, type):
        fields = [getattr(outputs, f.name) for f in dataclasses.fields(outputs)]
        return [t for field in fields for t in output_tensors(field)]
    if isinstance(outputs, dict):
        return [t for value in outputs.values() for t in output_tensors(value)]
    if isinstance(outputs, (list, tuple)):
        return [t for item in outputs for t in output_tensors(item)]
    return [t for t in tree_leaves(outputs) if isinstance(t, torch.Tensor)]

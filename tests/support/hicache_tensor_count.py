"""Count tensor work inside a block: torch-function calls and ATen ops (incl. syncs).

``TorchFunctionMode`` sees every call that goes through torch's Python API
(``len(t)``, ``t.tolist()``, ``t[i]``, arithmetic ...); ``TorchDispatchMode`` sees
every ATen op that reaches a kernel, and ``aten._local_scalar_dense`` is the
device-to-host read behind ``.item()``/``int(t)``/``bool(t)``: a sync on a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass
class TensorWork:
    function_calls: list = field(default_factory=list)
    aten_ops: list = field(default_factory=list)

    @property
    def host_syncs(self) -> int:
        return sum(1 for op in self.aten_ops if "_local_scalar_dense" in str(op))

    @property
    def total(self) -> int:
        return len(self.function_calls) + len(self.aten_ops)


class _FunctionCounter(TorchFunctionMode):
    def __init__(self, work: TensorWork):
        super().__init__()
        self.work = work

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.work.function_calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, work: TensorWork):
        super().__init__()
        self.work = work

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.work.aten_ops.append(func)
        return func(*args, **(kwargs or {}))


@contextmanager
def count_tensor_work():
    work = TensorWork()
    with _FunctionCounter(work), _DispatchCounter(work):
        yield work

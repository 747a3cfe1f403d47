"""How Triton runs this package's kernels: natively on a CUDA device, else in its interpreter.

Triton reads TRITON_INTERPRET when `@triton.jit` decorates a function, not when a kernel
is launched, so the choice has to be made before any kernel module is imported.
`kernels/__init__.py` imports this module first for that reason. An explicit
TRITON_INTERPRET in the environment is respected; without one, a machine with no CUDA
device gets the interpreter (Triton has no CPU backend: a native launch on CPU tensors
fails with "0 active drivers").

Triton's own @jit library functions (tl.zeros_like, tl.cdiv, tl.sum, ...) are decorated
when triton.language is first imported. If vLLM or torch imported it before this module
set the flag, those functions stay compiled-mode and fail under the interpreter
("Cannot call @triton.jit'd outside of the scope of a kernel"). So the kernels use only
Triton builtins and their own helpers, which this ordering always covers.
"""

from __future__ import annotations

import os
import sys

import torch

_ENV = "TRITON_INTERPRET"

HAS_CUDA: bool = torch.cuda.is_available()

# whether triton.language was imported before the flag was settled (see above)
TRITON_LANGUAGE_IMPORTED_EARLY: bool = "triton.language" in sys.modules

_USER_FLAG: str | None = os.environ.get(_ENV)

if _ENV not in os.environ and not HAS_CUDA:
    os.environ[_ENV] = "1"

import triton  # noqa: E402 - after the flag is settled

# What Triton itself will do, read back rather than assumed (the user may have set the
# flag, or triton.knobs, to something else).
INTERPRETED: bool = bool(triton.knobs.runtime.interpret)

# Where kernel inputs must live: the interpreter works on CPU tensors, native Triton on
# the CUDA device.
DEVICE: torch.device = torch.device("cpu") if INTERPRETED else torch.device("cuda")


class KernelsUnavailable(RuntimeError):
    """The kernels cannot run in this process; the message says why and how to fix it."""


def check_runnable() -> None:
    """Raise KernelsUnavailable when neither a CUDA device nor the interpreter is available."""
    if not INTERPRETED and not HAS_CUDA:
        raise KernelsUnavailable(
            f"{_ENV}={os.environ.get(_ENV)!r} turns Triton's interpreter off, and this machine "
            "has no CUDA device, so Triton cannot launch anything. Unset it (kernels/ then "
            f"picks the interpreter) or set {_ENV}=1 before importing kernels."
        )


def chosen_by_user() -> str:
    """`TRITON_INTERPRET=<v>` when the user's environment set it (a replay line must carry
    it), else "" (this module picks the same mode again on the same machine)."""
    return f"{_ENV}={_USER_FLAG}" if _USER_FLAG is not None else ""


def describe() -> str:
    """One line for logs and benchmark headers."""
    if INTERPRETED:
        return "Triton interpreter on CPU (results only; timings mean nothing)"
    return f"native Triton on {torch.cuda.get_device_name()}"

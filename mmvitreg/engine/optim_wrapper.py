"""Mixed-precision training on any device: ``torch.autocast`` on CPU (bfloat16) and CUDA (float16 or bfloat16)."""

from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from mmvitreg.registry import OPTIM_WRAPPERS


class Float32Ops(TorchFunctionMode):
    """Runs the ops that need float32 in float32 under CPU autocast, as CUDA autocast does.

    CUDA autocast casts softmax, log-softmax, cross entropy, logs, cosine similarity and their kin to float32 by
    itself; CPU autocast (torch 2.14) does not, so mmpretrain's heads would take their log-softmax in bfloat16. This
    mode upcasts the low-precision floating inputs of those ops to float32.
    """

    #: those ops: ``torch``'s, ``Tensor``'s and ``F``'s of these names, and ``F``'s losses
    NAMES = ('softmax', 'log_softmax', 'log', 'log1p', 'logsumexp', 'xlogy', 'cosine_similarity')
    OPS = frozenset(
        [getattr(space, name) for name in NAMES for space in (torch, Tensor, F) if hasattr(space, name)]
        + [
            F.cross_entropy,
            F.nll_loss,
            F.kl_div,
            F.binary_cross_entropy,
            F.normalize,
            F.binary_cross_entropy_with_logits,
        ]
    )
    LOW = (torch.bfloat16, torch.float16)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.OPS:
            args = tuple(a.float() if isinstance(a, Tensor) and a.dtype in self.LOW else a for a in args)
        return func(*args, **kwargs)


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """Automatic mixed precision that also runs on a CPU (``tools/train.py --amp``).

    mmengine 0.10.7's ``AmpOptimWrapper`` asserts an accelerator. This wrapper runs the model's forward and losses
    (inside :meth:`optim_context`) under ``torch.autocast`` on the device the model lives on:

    ======  ====================  =========================================================
    device  ``dtype``             gradient scaling
    ======  ====================  =========================================================
    CPU     ``bfloat16`` only     none (bfloat16 has float32's exponent range)
    CUDA    ``float16`` (default) dynamic ``torch.amp.GradScaler`` (as ``AmpOptimWrapper``)
    CUDA    ``bfloat16``          none
    ======  ====================  =========================================================

    Parameters, gradients and optimizer state stay float32. The ops that need float32 (softmax over classes, logs,
    cosine similarities) run in float32: CUDA autocast does so by itself, on CPU :class:`Float32Ops` does it.

    Args:
        dtype (str or torch.dtype, optional): ``'float16'`` or ``'bfloat16'``; None picks ``float16`` on CUDA and
            ``bfloat16`` on CPU. Defaults to None.
        loss_scale (str, float or dict): float16 only: ``'dynamic'``, an initial scale, or ``GradScaler``
            arguments. Defaults to ``'dynamic'``.
        device_type (str, optional): ``'cuda'`` or ``'cpu'``; None means CUDA when available.
        **kwargs: the arguments of :class:`mmengine.optim.OptimWrapper`.
    """

    DTYPES = ('float16', 'bfloat16')

    def __init__(self, dtype=None, loss_scale='dynamic', device_type=None, **kwargs):
        super().__init__(**kwargs)
        self.device_type = device_type or ('cuda' if torch.cuda.is_available() else 'cpu')
        if self.device_type not in ('cuda', 'cpu'):
            raise ValueError(f"device_type must be 'cuda' or 'cpu', got {self.device_type!r}")
        if dtype is None:
            dtype = 'float16' if self.device_type == 'cuda' else 'bfloat16'
        name = str(dtype).replace('torch.', '')
        if name not in self.DTYPES:
            raise ValueError(f'dtype must be one of {self.DTYPES}, got {dtype!r}')
        if self.device_type == 'cpu' and name != 'bfloat16':
            raise ValueError(
                f'mixed precision on a CPU runs in bfloat16 only (got {name}): '
                "use --amp-dtype bfloat16 or train on a GPU"
            )
        self.cast_dtype = getattr(torch, name)
        if self.device_type == 'cpu':
            print_log(
                'mixed precision on a CPU: the model trains under torch.autocast in bfloat16 '
                '(float16 needs a GPU); the weights and the optimizer stay float32',
                logger='current',
            )
        self.loss_scaler = None
        if self.cast_dtype == torch.float16:
            if isinstance(loss_scale, str) and loss_scale != 'dynamic':
                raise ValueError(f"loss_scale must be 'dynamic', a float or a dict, got {loss_scale!r}")
            if not isinstance(loss_scale, dict):
                loss_scale = {} if loss_scale == 'dynamic' else dict(init_scale=float(loss_scale))
            self.loss_scaler = torch.amp.GradScaler(self.device_type, **loss_scale)

    def backward(self, loss: torch.Tensor, **kwargs):
        """Back-propagate ``loss`` (scaled first under float16)."""
        if self.loss_scaler is not None:
            loss = self.loss_scaler.scale(loss)
        loss.backward(**kwargs)
        self._inner_count += 1

    def step(self, **kwargs):
        """Optimizer step; under float16 the gradients are unscaled (before clipping) and a step with non-finite
        gradients is skipped by the scaler."""
        if self.loss_scaler is None:
            return super().step(**kwargs)
        if self.clip_grad_kwargs:
            self.loss_scaler.unscale_(self.optimizer)
            self._clip_grad()
        self.loss_scaler.step(self.optimizer, **kwargs)
        self.loss_scaler.update()

    def state_dict(self) -> dict:
        """The optimizer state, plus ``loss_scaler`` under float16."""
        state_dict = super().state_dict()
        if self.loss_scaler is not None:
            state_dict['loss_scaler'] = self.loss_scaler.state_dict()
        return state_dict

    def load_state_dict(self, state_dict: dict) -> None:
        """Load the optimizer state (and the loss scaler's, under float16)."""
        state_dict = dict(state_dict)
        scaler_state = state_dict.pop('loss_scaler', None)
        if self.loss_scaler is not None and scaler_state is not None:
            self.loss_scaler.load_state_dict(scaler_state)
        super().load_state_dict(state_dict)

    @contextmanager
    def optim_context(self, model: nn.Module):
        """Gradient-accumulation context of :class:`OptimWrapper` plus ``torch.autocast`` (and, on CPU,
        :class:`Float32Ops`)."""
        with (
            super().optim_context(model),
            torch.autocast(self.device_type, dtype=self.cast_dtype),
            Float32Ops() if self.device_type == 'cpu' else nullcontext(),
        ):
            yield

"""The attention layers: one entry point for their core (:func:`mmvitreg.models.layers.attend`); they know rides
and window layouts, not traces."""

import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import mmvitreg.models.layers as layers
from mmvitreg.models.layers import (
    MultiheadSelfAttention,
    ReAttention,
    Ride,
    WindowAttention,
    WindowLayout,
    attend,
)
from mmvitreg.models.layers import (
    attention as attention_module,
)
from mmvitreg.models.layers import (
    ride as ride_module,
)


def imported_modules(path: Path, package):
    """Every module the file ``path`` of ``package`` (its dotted name as a list) imports, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = '.'.join(package[: len(package) + 1 - node.level] if node.level else [])
            module = '.'.join(filter(None, (base, node.module)))
            yield module
            yield from (f'{module}.{alias.name}' for alias in node.names)  # ``from .. import trace``


def test_no_layer_imports_the_trace():
    root = Path(layers.__file__).parent
    files = sorted(root.glob('**/*.py'))
    assert len(files) > 5
    for path in files:
        package = layers.__name__.split('.') + list(path.relative_to(root).parent.parts)
        bad = [m for m in imported_modules(path, package) if m.split('.')[:3] == ['mmvitreg', 'models', 'trace']]
        assert not bad, f'{path.name} imports {bad}'


KINDS = ('msa', 'reattention', 'window', 'shifted-window')
PATHS = ('explicit', 'fused-ride', 'fused', 'wide-ride', 'dropout')
#: what attend runs for each path and attention kind, on every device: the explicit map where a map is needed
#: (returned, a ride wider than the kernel takes, a ride under attention dropout), else the public fused kernel,
#: which carries a ride on widened q, k, v (timm's one switch)
KERNELS = {
    'msa': dict(explicit=['map'], dropout=['map'], fused=['sdpa'], wide_ride=['map'], fused_ride=['widened', 'sdpa']),
    'reattention': {path.replace('-', '_'): ['map'] for path in PATHS},
}
KERNELS['window'] = KERNELS['msa']


def build(kind):
    """The layer, its input ``(B', n, C)`` and, for a shifted window, its ``(nW, n, n)`` mask."""
    torch.manual_seed(0)
    if kind in ('window', 'shifted-window'):
        layout = WindowLayout((8, 12), 4, 2 if kind == 'shifted-window' else 0)
        layer = WindowAttention(32, (4, 4), 4, attn_drop=0.5)
        torch.nn.init.normal_(layer.relative_position_bias_table, std=0.5)
        return layer, torch.randn(2 * len(layout.grid_index()), 16, 32), layout.attn_mask()
    if kind == 'msa':
        return MultiheadSelfAttention(32, 4, attn_drop=0.5), torch.randn(2, 17, 32), None
    layer = ReAttention(32, 4, transform_scale=True)
    bn = layer.var_norm
    for t in (bn.weight, bn.bias, bn.running_mean):
        torch.nn.init.normal_(t, std=0.3)
    torch.nn.init.uniform_(bn.running_var, 0.5, 1.5)
    return layer, torch.randn(2, 17, 32), None


def reference(layer, x, mask):
    """``layer``'s output ``(B', n, C)`` and map ``(B', H, n, n)``, the textbook way: ``A = Softmax(q k^T * scale
    + B + M)`` (re-attention: ``Norm(Θ^T A) * scale`` with the norm's running statistics), ``proj(A v)``."""
    Bp, n, C = x.shape
    H = layer.num_heads
    q, k, v = layer.qkv(x).reshape(Bp, n, 3, H, C // H).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-2, -1) * layer.scale
    if isinstance(layer, WindowAttention):
        logits = logits + layer.position_bias()
        if mask is not None:  # window w of every image: batch entry b = image * nW + w
            logits = logits + mask.repeat(Bp // mask.shape[0], 1, 1).unsqueeze(1)
    attn = logits.softmax(-1)
    if isinstance(layer, ReAttention):
        theta, bn, s = layer.reatten_matrix.weight[:, :, 0, 0], layer.var_norm, (1, H, 1, 1)
        attn = torch.einsum('bhij,gh->bgij', attn, theta) + layer.reatten_matrix.bias.view(s)
        attn = (attn - bn.running_mean.view(s)) / torch.sqrt(bn.running_var.view(s) + bn.eps)
        attn = (attn * bn.weight.view(s) + bn.bias.view(s)) * layer.reatten_scale
    return layer.proj((attn @ v).transpose(1, 2).reshape(Bp, n, C)), attn


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('kind', KINDS)
def test_attend_gives_the_reference_on_every_path(monkeypatch, kind, path):
    """Every attention layer's core goes through :func:`attend`; on each path it takes (explicit map, fused kernel
    carrying a ride, public fused kernel, a ride too wide for the kernel, a ride under attention dropout) the
    output, the map and ``ride.mixed`` are the textbook ones: ``Softmax(q k^T * scale + bias) v`` (re-attention: its
    re-mixed map) and the head mean of the map (before dropout, negative weights dropped) applied to the values."""
    if kind == 'reattention' and path == 'dropout':
        pytest.skip('re-attention drops out inside its map, before Θ and the norm (train mode: batch statistics)')
    layer, x, mask = build(kind)
    layer.train(path == 'dropout')
    channels = dict(fused=0, wide_ride=ride_module.RIDE_CHANNELS + 1).get(path.replace('-', '_'), 2)
    ride = Ride(torch.rand(*x.shape[:2], channels)) if channels else None

    ran = []

    def spy(name, fn):
        return lambda *args, **kwargs: ran.append(name) or fn(*args, **kwargs)

    if kind == 'reattention':  # its map (which builds on the softmax map) is the one spied
        monkeypatch.setattr(layer, 'attention_map', spy('map', layer.attention_map))
    else:
        monkeypatch.setattr(attention_module, 'head_logits', spy('map', attention_module.head_logits))
    monkeypatch.setattr(attention_module, 'attend_widened', spy('widened', attention_module.attend_widened))
    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy('sdpa', F.scaled_dot_product_attention))

    need_attn = path == 'explicit'
    kwargs = dict(need_attn=need_attn, ride=ride, **({} if mask is None else dict(mask=mask)))
    with torch.no_grad():
        out = layer(x, **kwargs)
        out, attn = out if need_attn else (out, None)
        expected, expected_attn = reference(layer, x, mask)
    assert ran == KERNELS[kind.replace('shifted-', '')][path.replace('-', '_')]
    if path != 'dropout':
        assert (out - expected).abs().max() <= 1e-6
    if need_attn:
        assert attn.shape == expected_attn.shape and (attn - expected_attn).abs().max() <= 1e-6
    if ride is not None:
        mixed = expected_attn.mean(1).clamp(min=0) @ ride.values
        assert ride.mixed.shape == mixed.shape and (ride.mixed - mixed).abs().max() <= 1e-6
    if kind == 'reattention':
        assert expected_attn.mean(1).min() < 0  # the max(0, .) of Ride.mixed is exercised


def test_attend_refuses_a_bias_with_an_attention_map():
    qkv = torch.zeros(1, 3, 3, 1, 2)
    with pytest.raises(ValueError, match='bias or an attention_map'):
        attend(qkv, 1.0, bias=torch.zeros(1, 1, 3, 3), attention_map=lambda q, k: q @ k.transpose(-2, -1))


@pytest.mark.parametrize('windows', [1, 3])
@pytest.mark.parametrize('channels', [1, 2, 8])
def test_widened_call_gives_the_unwidened_output_gradients_and_mixed_values(channels, windows):
    """The public fused path of a ride (the GPU's): the qkv projection ``(B', n, 3, H, d)`` widened in one op, ``q, k``
    by zeros and ``v`` by the values, one ``F.scaled_dot_product_attention`` call (windows folded into the head axis
    against a bias). Its output and the projection's gradient equal the plain call's, and ``ride.mixed`` equals the
    head-mean map applied to the values."""
    torch.manual_seed(0)
    heads, n, d = 2, 9, 12
    qkv = torch.randn(2 * windows, n, 3, heads, d, requires_grad=True)
    bias = torch.randn(1, windows * heads, n, n) if windows > 1 else None
    values = torch.rand(2 * windows, n, channels)
    grad = torch.randn(2, windows * heads, n, d)
    q, k, v = (t.reshape(2, windows * heads, n, d) for t in qkv.permute(2, 0, 3, 1, 4).unbind(0))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
    expected_grad = torch.autograd.grad((expected * grad).sum(), qkv)[0]
    ride = Ride(values)
    out = ride_module.attend_widened(qkv, ride, 0.3, bias)
    assert out.shape == expected.shape and (out - expected).abs().max() <= 1e-6
    assert (torch.autograd.grad((out * grad).sum(), qkv)[0] - expected_grad).abs().max() <= 1e-5
    logits = (q * 0.3) @ k.transpose(-2, -1) + (0 if bias is None else bias)
    maps = logits.softmax(-1).view(2, windows, heads, n, n).mean(2).flatten(0, 1)
    assert ride.mixed.dtype == torch.float32 and not ride.mixed.requires_grad
    assert ride.mixed.shape == (2 * windows, n, channels)
    assert (ride.mixed - maps.detach() @ values).abs().max() <= 1e-6


def test_widened_call_under_bf16_autocast_mixes_with_the_bf16_map():
    """Under bf16 autocast the ride rides in bf16 (the official AMP code mixes its labels with the low-precision
    map too): ``ride.mixed`` is float32 and within bf16 rounding of the float32 reference; the output is the
    plain bf16 call's."""
    torch.manual_seed(0)
    qkv = torch.randn(2, 16, 3, 3, 8)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    values = torch.rand(2, 16, 2)
    ride = Ride(values)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = ride_module.attend_widened(qkv, ride, 0.5)
        plain = F.scaled_dot_product_attention(q, k, v, scale=0.5)
    assert out.dtype == torch.bfloat16 and (out.float() - plain.float()).abs().max() <= 2e-2
    reference = ((q * 0.5) @ k.transpose(-2, -1)).softmax(-1).mean(1) @ values
    assert ride.mixed.dtype == torch.float32 and (ride.mixed - reference).abs().max() <= 2e-2


@pytest.mark.parametrize('device', ['cpu', 'cuda'])
@pytest.mark.parametrize('kind', ['msa', 'window'])
def test_a_ride_takes_the_widened_call_on_every_device(monkeypatch, kind, device):
    """The switch reads no device: on the CPU and on a GPU (here: tensors that say they live on one) a ride of at
    most ``RIDE_CHANNELS`` channels rides in the public fused call on widened ``q, k, v``, with or without a
    bias, and no map is formed."""
    ran = []
    monkeypatch.setattr(attention_module, 'head_logits', lambda *a: ran.append('map'))
    widened = attention_module.attend_widened
    monkeypatch.setattr(attention_module, 'attend_widened', lambda *a: ran.append('widened') or widened(*a))

    class OnDevice(torch.Tensor):  # what attend could read of the device; the arithmetic stays on the CPU
        @property
        def device(self):
            return torch.device(device, 0)

    qkv = torch.randn(2, 16, 3, 4, 8).as_subclass(OnDevice)
    bias = torch.randn(2, 4, 16, 16) if kind == 'window' else None  # two windows of one image
    ride = Ride(torch.rand(2, 16, 2))
    attend(qkv, 0.5, bias=bias, ride=ride)
    assert ran == ['widened'] and ride.mixed.shape == (2, 16, 2)


def test_a_trained_window_bias_rides_in_the_fused_call(monkeypatch):
    """In training, Swin's bias needs a gradient: the ride still rides in the fused call (no explicit map), and
    the output, the gradients of the input and of the position-bias table and the ride's mixed values equal the
    textbook ones."""
    layer, x, mask = build('shifted-window')
    layer.eval()
    ran, widened = [], attention_module.attend_widened
    monkeypatch.setattr(attention_module, 'head_logits', lambda *a: ran.append('map'))
    monkeypatch.setattr(attention_module, 'attend_widened', lambda *a: ran.append('widened') or widened(*a))
    x.requires_grad_(True)
    ride = Ride(torch.rand(*x.shape[:2], 2))
    out = layer(x, mask=mask, ride=ride)
    grads = torch.autograd.grad(out.square().sum(), (x, layer.relative_position_bias_table))
    expected, expected_attn = reference(layer, x, mask)
    expected_grads = torch.autograd.grad(expected.square().sum(), (x, layer.relative_position_bias_table))
    assert ran == ['widened']
    assert (out - expected).abs().max() <= 1e-6
    for got, want in zip(grads, expected_grads):
        assert (got - want).abs().max() <= 1e-5
    mixed = expected_attn.detach().mean(1) @ ride.values
    assert (ride.mixed - mixed).abs().max() <= 1e-6

"""Attention kinds of the ViT family: MHSA (fused / explicit), Re-attention (DeepViT Eq. 3), talking heads."""

import copy
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmvitreg.models.layers import MultiheadSelfAttention, ReAttention, TalkingHeadsAttention

B, N, C, H = 2, 7, 24, 4
D = C // H


def split_heads(attn, x):
    """q, k, v ``(B, H, N, D)`` computed from the module's own qkv projection (reference)."""
    qkv = attn.qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
    return qkv[0], qkv[1], qkv[2]


def finish(attn, weights, v):
    """Reference output projection of the attended values."""
    return attn.proj((weights @ v).transpose(1, 2).reshape(B, N, C))


def randomise_(module):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        for name, buf in module.named_buffers():
            if name.endswith('running_mean'):
                buf.copy_(torch.randn_like(buf) * 0.1)
            elif name.endswith('running_var'):
                buf.copy_(torch.rand_like(buf) + 0.5)
    return module


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(B, N, C)


def test_msa_fused_equals_explicit_and_rows_sum_to_one(x):
    """Standard MHSA: Softmax(QK^T/sqrt(d))V; the fused kernel and the explicit path agree."""
    attn = MultiheadSelfAttention(C, H).eval()
    fused = attn(x)
    explicit, weights = attn(x, need_attn=True)
    q, k, v = split_heads(attn, x)
    ref_w = (q @ k.transpose(-2, -1) / D**0.5).softmax(-1)
    torch.testing.assert_close(weights, ref_w)
    torch.testing.assert_close(explicit, finish(attn, ref_w, v))
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, N))


class Dispatched(TorchDispatchMode):
    """Every aten op run under it, with the shapes of its tensor outputs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = [
            tuple(t.shape) for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)
        ]
        self.ops.append((func.overloadpacket.__name__, shapes))
        return out


@pytest.mark.parametrize('train', [False, True])
def test_msa_without_map_uses_the_fused_kernel(x, train):
    """No attention map asked for -> one fused SDPA kernel runs, no softmax op, and no ``(B, H, N, N)`` tensor
    (the map) is ever formed, forward or backward (fails when :func:`attend` takes its explicit path)."""
    attn = MultiheadSelfAttention(C, H).train(train)
    x = x.requires_grad_(train)
    with Dispatched() as seen:
        out = attn(x)
        if train:
            out.sum().backward()
    names = [name for name, _ in seen.ops]
    assert out.shape == (B, N, C)
    assert sum(name.startswith('_scaled_dot_product') and 'backward' not in name for name in names) == 1, names
    assert not [name for name in names if 'softmax' in name]
    assert not [op for op in seen.ops if any(s[-2:] == (N, N) for s in op[1])]


def test_reattention_map_costs_its_own_ops_only(x):
    """Issue 36 (re-attention <= 1.10x MSA in aten ops): in training, a re-attention forward dispatches, beyond a
    fused MSA forward, only its map's work: one copy of the packed q, k, v in and one of the output out (each a
    clone), the scale's mul, k's transpose, two 3-D bmms for one SDPA, the softmax, Θ as one convolution,
    BatchNorm (its counter's add_, empty, native_batch_norm), reatten_scale's mul and three views between the
    batched-matmul shapes (B H, ...) and (B, H, ...): at most 15 ops. Fails when a matmul is decomposed (its
    expands), Θ is restated around the conv or the scale costs more than one op."""
    torch.manual_seed(0)
    counts = {}
    for name, layer in (('msa', MultiheadSelfAttention(C, H)), ('reatt', ReAttention(C, H, transform_scale=True))):
        with Dispatched() as seen:
            layer.train()(x)
        counts[name] = Counter(name for name, _ in seen.ops)
    extra = counts['reatt'] - counts['msa']
    assert not extra['expand'] and extra['bmm'] == 2 and extra['convolution'] == 1, extra
    assert counts['reatt'].total() - counts['msa'].total() <= 15, extra


@pytest.mark.parametrize('transform_scale', [False, True])
def test_reattention_matches_eq3_with_official_theta_and_bn(x, transform_scale):
    """DeepViT Eq. 3: Norm(Θ^T Softmax(QK^T/sqrt(d))) V, Θ a 1×1 conv with bias, Norm = BatchNorm2d over heads."""
    attn = randomise_(ReAttention(C, H, transform_scale=transform_scale)).eval()
    out, weights = attn(x, need_attn=True)

    q, k, v = split_heads(attn, x)
    a = (q @ k.transpose(-2, -1) / D**0.5).softmax(-1)
    theta = attn.reatten_matrix.weight[:, :, 0, 0].T  # Θ, so that the conv computes Θ^T A per position
    mixed = torch.einsum('bhij,hg->bgij', a, theta) + attn.reatten_matrix.bias.view(1, H, 1, 1)
    bn = attn.var_norm
    shape = (1, H, 1, 1)
    normed = (mixed - bn.running_mean.view(shape)) / torch.sqrt(bn.running_var.view(shape) + bn.eps)
    normed = normed * bn.weight.view(shape) + bn.bias.view(shape)
    if transform_scale:
        normed = normed * D**-0.5
    torch.testing.assert_close(weights, normed)
    torch.testing.assert_close(out, finish(attn, normed, v))
    # no forward without the map can skip the head mixing
    torch.testing.assert_close(attn(x), out)


@pytest.mark.parametrize('transform_scale', [False, True])
@pytest.mark.parametrize('bias', [False, True])
@pytest.mark.parametrize('norm', ['bn', 'ln', None])
def test_reattention_trains_as_the_official_forward(x, norm, bias, transform_scale):
    """The map equals the official forward's order of operations, ``(q k^T * scale).softmax``, ``reatten_matrix``
    (1×1 conv), ``var_norm``, ``* reatten_scale``, then ``@ v``: outputs, gradients w.r.t. the input and every
    parameter, and the BN running statistics agree in train mode (momentum 0.1, then None: cumulative average)
    and in eval mode."""
    attn = randomise_(ReAttention(C, H, norm=norm, bias=bias, transform_scale=transform_scale))
    ref = copy.deepcopy(attn)

    def reference(inputs):
        q, k, v = split_heads(ref, inputs)
        mixed = ref.reatten_matrix((q @ k.transpose(-2, -1) * ref.scale).softmax(-1))
        if norm == 'bn':
            mixed = ref.var_norm(mixed)
        elif norm == 'ln':
            mixed = ref.var_norm(mixed.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        if transform_scale:
            mixed = mixed * D**-0.5
        return finish(ref, mixed, v), mixed

    torch.manual_seed(2)  # upstream gradients of 0.1 keep every gradient O(1), so atol 1e-5 is float32 rounding
    grad_out, grad_map = torch.randn(B, N, C) * 0.1, torch.randn(B, H, N, N) * 0.1
    for training, momentum in ((True, 0.1), (True, None), (True, None), (False, None)):
        for module in (attn, ref):
            module.train(training)
            if norm == 'bn':
                module.var_norm.momentum = momentum
        results = []
        for forward, module in ((lambda inputs: attn(inputs, need_attn=True), attn), (reference, ref)):
            module.zero_grad()
            inputs = x.clone().requires_grad_()
            out, weights = forward(inputs)
            ((out * grad_out).sum() + (weights * grad_map).sum()).backward()
            grads = {name: p.grad for name, p in module.named_parameters()}
            results.append((out, weights, inputs.grad, grads, module.state_dict()))
        (out, weights, grad_x, grads, state), (ref_out, ref_weights, ref_grad_x, ref_grads, ref_state) = results
        tol = dict(atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights, ref_weights, **tol)
        torch.testing.assert_close(out, ref_out, **tol)
        torch.testing.assert_close(grad_x, ref_grad_x, **tol)
        assert set(grads) == set(ref_grads) and all(g is not None for g in grads.values())
        for name, grad in ref_grads.items():
            torch.testing.assert_close(grads[name], grad, **tol, msg=lambda m, name=name: f'grad of {name}: {m}')
        assert set(state) == set(ref_state)  # running_mean / running_var / num_batches_tracked included
        for name, value in ref_state.items():
            torch.testing.assert_close(state[name], value, **tol, msg=lambda m, name=name: f'{name}: {m}')
    if norm == 'bn':
        assert int(attn.var_norm.num_batches_tracked) == 3


def test_reattention_with_identity_theta_and_no_norm_is_mhsa(x):
    """The paper's special case: Θ = I (no bias) and no Norm gives the standard MHSA."""
    re_attn = ReAttention(C, H, norm=None).eval()
    msa = MultiheadSelfAttention(C, H).eval()
    msa.load_state_dict({k: v for k, v in re_attn.state_dict().items() if not k.startswith('reatten_matrix')})
    with torch.no_grad():
        re_attn.reatten_matrix.weight.copy_(torch.eye(H).view(H, H, 1, 1))
        re_attn.reatten_matrix.bias.zero_()
    torch.testing.assert_close(re_attn(x), msa(x), atol=1e-6, rtol=1e-5)


def test_reattention_layernorm_over_heads(x):
    """norm='ln' (lucidrains' choice): LayerNorm across the H re-generated maps at each (i, j)."""
    attn = randomise_(ReAttention(C, H, norm='ln')).eval()
    _, weights = attn(x, need_attn=True)
    q, k, _ = split_heads(attn, x)
    mixed = attn.reatten_matrix((q @ k.transpose(-2, -1) / D**0.5).softmax(-1))
    ref = torch.nn.functional.layer_norm(mixed.permute(0, 2, 3, 1), (H,), attn.var_norm.weight, attn.var_norm.bias)
    torch.testing.assert_close(weights, ref.permute(0, 3, 1, 2))


def test_reattention_state_dict_keys_are_official():
    """Official key names: reatten_matrix (Conv2d H->H 1×1 with bias) and var_norm (BatchNorm2d(H))."""
    sd = ReAttention(C, H).state_dict()
    assert sd['reatten_matrix.weight'].shape == (H, H, 1, 1) and sd['reatten_matrix.bias'].shape == (H,)
    assert {'var_norm.weight', 'var_norm.running_mean', 'var_norm.running_var'} <= set(sd)
    assert 'reatten_matrix.bias' not in ReAttention(C, H, bias=False).state_dict()


def test_reattention_rejects_unknown_norm():
    with pytest.raises(ValueError, match="'bn', 'ln', None"):
        ReAttention(C, H, norm='gn')


@pytest.mark.parametrize('bias', [False, True])
def test_talking_heads_matches_reference(x, bias):
    """Talking heads (DiversePatch use_talk): P_post(Softmax(P_pre(QK^T/sqrt(d)))) over the head axis."""
    attn = randomise_(TalkingHeadsAttention(C, H, bias=bias)).eval()
    out, weights = attn(x, need_attn=True)
    q, k, v = split_heads(attn, x)
    logits = q @ k.transpose(-2, -1) / D**0.5
    pre = torch.einsum('bhij,gh->bgij', logits, attn.proj_pre.weight)
    if bias:
        pre = pre + attn.proj_pre.bias.view(1, H, 1, 1)
    post = torch.einsum('bhij,gh->bgij', pre.softmax(-1), attn.proj_post.weight)
    if bias:
        post = post + attn.proj_post.bias.view(1, H, 1, 1)
    torch.testing.assert_close(weights, post)
    torch.testing.assert_close(out, finish(attn, post, v))
    assert set(attn.state_dict()) >= {'proj_pre.weight', 'proj_post.weight'}
    assert ('proj_pre.bias' in attn.state_dict()) == bias


def test_attention_with_indivisible_heads_builds_and_refuses_to_run():
    """As mmpretrain's ``MultiheadAttention``, which builds such a layer and fails in its forward."""
    layer = MultiheadSelfAttention(10, 3)
    with pytest.raises(ValueError, match=r'embed_dims \(10\) must be divisible by num_heads \(3\)'):
        layer(torch.randn(1, 4, 10))

"""DeepViT Eq. 2 (cross-layer attention similarity) and the "similar blocks" count."""

import pytest
import torch
from studies.attention_similarity import AttentionSimilarity, adjacent_blocks, attention_similarity


def _softmax_maps(b=2, h=3, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, n, n, generator=g).softmax(-1)


def _permutation_maps(perm, b=2, h=3):
    """Each output token i attends only to input token perm[i] (rows sum to 1)."""
    n = len(perm)
    a = torch.zeros(n, n)
    a[torch.arange(n), torch.tensor(perm)] = 1
    return a.expand(b, h, n, n).clone()


def test_eq2_identical_maps_give_one():
    a = _softmax_maps()
    m = attention_similarity(a, a.clone())
    assert m.shape == (2, 3, 5)
    torch.testing.assert_close(m, torch.ones_like(m))


def test_eq2_orthogonal_columns_give_zero():
    # identity vs a cyclic shift: column t of the first is e_t, of the second e_{t-1} -> orthogonal
    eye = _permutation_maps([0, 1, 2, 3])
    shift = _permutation_maps([1, 2, 3, 0])
    torch.testing.assert_close(attention_similarity(eye, shift), torch.zeros(2, 3, 4))


def test_eq2_is_per_column_cosine():
    """M^{p,q}_{h,t} compares A_{h,:,t} (a column: token t's contribution to every output token)."""
    p, q = _softmax_maps(seed=1), _softmax_maps(seed=2)
    m = attention_similarity(p, q)
    b, h, t = 1, 2, 3
    ref = torch.nn.functional.cosine_similarity(p[b, h, :, t], q[b, h, :, t], dim=0)
    torch.testing.assert_close(m[b, h, t], ref)
    # a column-wise cosine is not a row-wise one for these maps
    row = torch.nn.functional.cosine_similarity(p[b, h, t, :], q[b, h, t, :], dim=0)
    assert not torch.isclose(m[b, h, t], row)


def test_adjacent_blocks():
    assert adjacent_blocks(0, 5) == [1]
    assert adjacent_blocks(2, 5) == [1, 3]
    assert adjacent_blocks(4, 5) == [3]
    assert adjacent_blocks(2, 5, neighbours=2) == [0, 1, 3, 4]


def test_matrix_and_similar_blocks_of_a_constructed_sequence():
    """Three distinct blocks then three identical ones: only blocks whose adjacent blocks all share
    their map reach a 100% ratio; the first of the run averages 0 (orthogonal) and 1 -> 0.5."""
    perms = [[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2], [3, 0, 1, 2], [3, 0, 1, 2]]
    maps = [_permutation_maps(p) for p in perms]
    acc = AttentionSimilarity(num_blocks=6)
    acc.update(maps)
    acc.update(maps)  # averaging over batches leaves the means unchanged
    res = acc.compute()
    expected = torch.tensor([[float(perms[p] == perms[q]) for q in range(6)] for p in range(6)])
    torch.testing.assert_close(res.matrix, expected)
    torch.testing.assert_close(res.adjacent, torch.tensor([0.0, 0.0, 0.0, 0.5, 1.0, 1.0]))
    torch.testing.assert_close(res.ratio, res.adjacent)
    assert res.similar.tolist() == [False, False, False, False, True, True]
    assert res.num_similar_blocks == 2
    assert res.num_images == 4


def test_vector_threshold_counts_the_share_of_similar_vectors():
    """Fig. 3(a) reading: the ratio is the share of token-wise vectors above a cosine threshold."""
    n = 4
    eye = _permutation_maps(list(range(n)), b=1, h=1)
    half = eye.clone()
    half[..., :, :2] = _permutation_maps([1, 0, 2, 3], b=1, h=1)[..., :, :2]  # columns 0, 1 changed
    acc = AttentionSimilarity(num_blocks=2, vector_threshold=0.5)
    acc.update([eye, half])
    res = acc.compute()
    torch.testing.assert_close(res.ratio, torch.tensor([0.5, 0.5]))  # 2 of 4 columns identical
    assert res.num_similar_blocks == 0
    acc = AttentionSimilarity(num_blocks=2, vector_threshold=0.5, ratio_threshold=0.5)
    acc.update([eye, half])
    assert acc.compute().num_similar_blocks == 2


def test_bad_input_is_rejected():
    acc = AttentionSimilarity(num_blocks=3)
    with pytest.raises(ValueError, match='3 blocks'):
        acc.update([_softmax_maps()] * 2)
    with pytest.raises(RuntimeError, match='update'):
        acc.compute()
    with pytest.raises(ValueError, match=r'\(B, heads, N, N\)'):
        attention_similarity(torch.rand(2, 3, 4), torch.rand(2, 3, 4))


# ---------------------------------------------------------------------------------------------
# the tool, end to end on a tiny DeepViT and the bundled digits classification set

TINY_CONFIG = """
_base_ = ['{configs}/_base_/models/deepvit.py', '{configs}/_base_/datasets/digits_imagenet.py',
          'mmpretrain::_base_/default_runtime.py']
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64,
                  attn_types=['msa', 'msa', 'reattn', 'reattn']),
        img_size=32, patch_size=8),
    head=dict(num_classes=10, in_channels=32))
"""


def _read_csv(path):
    import csv

    with open(path) as f:
        return list(csv.DictReader(f))


def test_tool_on_digits_untrained_and_from_a_checkpoint(digits_workspace, tmp_path):
    """Untrained: a 4x4 matrix with ones on the diagonal (every block's maps equal themselves).
    From a checkpoint whose queries and keys are all zero (uniform attention; re-attention's Θ the
    identity): every pair of blocks has identical maps, so Eq. 2 is 1 everywhere and all 4 blocks
    are similar -- which only holds if the checkpoint was loaded."""
    from conftest import CONFIGS, run_tool
    from mmengine.config import Config
    from mmengine.registry import MODELS, DefaultScope

    cfg_path = tmp_path / 'tiny_deepvit_digits.py'
    cfg_path.write_text(TINY_CONFIG.format(configs=CONFIGS))
    args = [
        'analysis_tools/attention_similarity.py',
        cfg_path,
        '--num-images',
        12,
        '--batch-size',
        5,
        '--num-workers',
        0,
        '--device',
        'cpu',
    ]

    proc = run_tool(args + ['--out', tmp_path / 'untrained'], cwd=digits_workspace)
    rows = _read_csv(tmp_path / 'untrained.csv')
    assert [int(r['block']) for r in rows] == [1, 2, 3, 4]
    matrix = torch.tensor([[float(r[f'similarity_to_block_{q}']) for q in range(1, 5)] for r in rows])
    torch.testing.assert_close(matrix.diagonal(), torch.ones(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(matrix, matrix.T, atol=1e-5, rtol=0)
    assert (tmp_path / 'untrained.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'similar blocks:' in proc.stdout

    cfg = Config.fromfile(str(cfg_path))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
    # seeded queries and keys 50x the init scale: sharp maps that differ from block to block (at the
    # init scale attention is near uniform and every pair of blocks scores ~1)
    state = model.state_dict()
    for key in state:
        if key.endswith('.attn.qkv.weight'):
            state[key].normal_(0.0, 1.0)
    torch.save(dict(state_dict=state), tmp_path / 'sharp.pth')
    run_tool(args + ['--checkpoint', tmp_path / 'sharp.pth', '--out', tmp_path / 'sharp'], cwd=digits_workspace)
    rows = _read_csv(tmp_path / 'sharp.csv')
    matrix = torch.tensor([[float(r[f'similarity_to_block_{q}']) for q in range(1, 5)] for r in rows])
    assert (matrix < 0.9).any()  # the tool compares different blocks' maps

    state = model.state_dict()
    for key in state:
        if '.attn.qkv.' in key:
            state[key].zero_()
        if key.endswith('reatten_matrix.weight'):
            state[key].copy_(torch.eye(2).view(2, 2, 1, 1))
        if key.endswith('reatten_matrix.bias'):
            state[key].zero_()
    torch.save(dict(state_dict=state), tmp_path / 'uniform.pth')
    proc = run_tool(
        args + ['--checkpoint', tmp_path / 'uniform.pth', '--out', tmp_path / 'uniform'], cwd=digits_workspace
    )
    rows = _read_csv(tmp_path / 'uniform.csv')
    matrix = torch.tensor([[float(r[f'similarity_to_block_{q}']) for q in range(1, 5)] for r in rows])
    torch.testing.assert_close(matrix, torch.ones(4, 4), atol=1e-5, rtol=0)
    assert [r['similar_block'] for r in rows] == ['1'] * 4
    assert 'similar blocks: 4 of 4' in proc.stdout

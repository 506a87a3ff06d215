"""Crafted ``torch.save`` label maps: the archive torch writes (``<name>/data.pkl``, ``<name>/data/0``,
``<name>/byteorder``, ``<name>/version``) with whatever tensor geometry, storage size, member size, dtype and
compression a test asks for, so a reader can be fed what ``torch.save`` never writes."""
import io
import pickle
import zipfile
from collections import OrderedDict

import torch
from torch._utils import _rebuild_tensor_v2

STORAGES = {'HalfStorage': torch.float16, 'FloatStorage': torch.float32, 'DoubleStorage': torch.float64,
            'LongStorage': torch.int64, 'BFloat16Storage': torch.bfloat16}


class _Storage:
    pass


class _Tensor:
    """Pickles as torch pickles a tensor: ``_rebuild_tensor_v2(storage, offset, size, stride, False, {})``."""

    def __init__(self, offset, size, stride):
        self.storage, self.args = _Storage(), (offset, tuple(size), tuple(stride))

    def __reduce__(self):
        return _rebuild_tensor_v2, (self.storage, *self.args, False, OrderedDict())


def craft_map(path, size, stride, offset=0, numel=None, storage='HalfStorage', member_bytes=None,
              compress=zipfile.ZIP_STORED, values=None, member_size=None):
    """Write a ``.pt`` file holding one tensor of ``size`` / ``stride`` / ``offset`` over a storage that declares
    ``numel`` values (default: exactly what the view reaches); the member ``data/0`` holds ``member_bytes`` bytes
    (default: ``numel`` values, ``values`` repeated: small class-like integers unless given), written with
    ``compress``; ``member_size`` (bytes) writes a member of that many zero bytes instead, streamed (a zip bomb
    when deflated). Returns ``path``."""
    reach = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(n > 0 for n in size) else offset
    numel = reach if numel is None else numel
    tensor = _Tensor(offset, size, stride)
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=2)
    pickler.persistent_id = lambda obj: (('storage', getattr(torch, storage), '0', 'cpu', numel)
                                         if obj is tensor.storage else None)
    pickler.dump(tensor)
    with zipfile.ZipFile(path, 'w', compresslevel=1) as archive:
        archive.writestr('archive/data.pkl', buffer.getvalue(), zipfile.ZIP_STORED)
        archive.writestr('archive/byteorder', 'little', zipfile.ZIP_STORED)
        member = zipfile.ZipInfo('archive/data/0')
        member.compress_type = compress
        if member_size is not None:
            with archive.open(member, 'w', force_zip64=True) as f:
                chunk = bytes(64 << 20)
                for start in range(0, member_size, len(chunk)):
                    f.write(chunk[:member_size - start])
        else:
            if member_bytes is None:
                pattern = torch.arange(10) if values is None else torch.as_tensor(values)
                data = pattern.to(STORAGES[storage]).repeat(numel // len(pattern) + 1)[:numel]
                member_bytes = (data.view(torch.int16) if data.dtype == torch.bfloat16 else data).numpy().tobytes()
            archive.writestr(member, member_bytes)
        archive.writestr('archive/version', '3\n', zipfile.ZIP_STORED)
    return path

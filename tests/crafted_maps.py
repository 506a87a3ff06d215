"""Crafted label maps, so that a reader can be fed what ``torch.save`` and ``np.save`` never write.

``craft_map``: the archive torch writes (``<name>/data.pkl``, ``<name>/data/0``, ``<name>/byteorder``,
``<name>/version``) with whatever tensor geometry, storage size, member size, dtype and compression a test asks for;
``craft_tensors``: several tensors over one member, each declaring its own storage dtype, size, offset and strides
(one member read as float32, then as float16 at another offset); ``memo_bomb``: a 363-byte archive whose pickle asks an
unpickler for a 2**26-entry memo; ``craft_npy``: an ``.npy`` header declaring any shape / dtype over any data."""

import io
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import torch
from torch._utils import _rebuild_tensor_v2

STORAGES = {
    'HalfStorage': torch.float16,
    'FloatStorage': torch.float32,
    'DoubleStorage': torch.float64,
    'LongStorage': torch.int64,
    'BFloat16Storage': torch.bfloat16,
}


class _Storage:
    def __init__(self, storage='HalfStorage', numel=0, key='0'):
        self.pid = ('storage', getattr(torch, storage), key, 'cpu', numel)


class _Tensor:
    """Pickles as torch pickles a tensor: ``_rebuild_tensor_v2(storage, offset, size, stride, False, {})``."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.args = storage, (offset, tuple(size), tuple(stride))

    def __reduce__(self):
        return _rebuild_tensor_v2, (self.storage, *self.args, False, OrderedDict())


def reach(size, stride, offset=0):
    """One past the last storage element a view reaches."""
    return offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(n > 0 for n in size) else offset


def _archive(path, data_pkl, members, compress=zipfile.ZIP_STORED, member_size=None):
    with zipfile.ZipFile(path, 'w', compresslevel=1) as archive:
        archive.writestr('archive/data.pkl', data_pkl, zipfile.ZIP_STORED)
        archive.writestr('archive/byteorder', 'little', zipfile.ZIP_STORED)
        for key, member_bytes in members.items():
            member = zipfile.ZipInfo(f'archive/data/{key}')
            member.compress_type = compress
            if member_size is not None:
                with archive.open(member, 'w', force_zip64=True) as f:
                    chunk = bytes(64 << 20)
                    for start in range(0, member_size, len(chunk)):
                        f.write(chunk[: member_size - start])
            else:
                archive.writestr(member, member_bytes)
        archive.writestr('archive/version', '3\n', zipfile.ZIP_STORED)
    return path


def _pickle(objects, storages, last_only=False):
    """The pickle of the list ``objects``, or with ``last_only`` of its last object alone, the others built before
    it and popped (``PROTO, obj1, POP, obj2, ..., STOP``), their memo entries left for the later ones."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=2)
    pickler.persistent_id = lambda o: next((s.pid for s in storages if o is s), None)
    if not last_only:
        pickler.dump(objects)
        return buffer.getvalue()
    parts = []
    for obj in objects:
        start = buffer.tell()
        pickler.dump(obj)  # PROTO 2 (2 bytes), the object, STOP
        parts.append(buffer.getvalue()[start + 2 : -1])
    return b'\x80\x02' + b'0'.join(parts) + b'.'


def member_values(numel, storage='HalfStorage', values=None):
    """``numel`` values of ``storage``'s dtype as bytes: ``values`` repeated (small class-like integers unless
    given)."""
    pattern = torch.arange(10) if values is None else torch.as_tensor(values)
    data = pattern.to(STORAGES[storage]).repeat(numel // len(pattern) + 1)[:numel]
    return (data.view(torch.int16) if data.dtype == torch.bfloat16 else data).numpy().tobytes()


def craft_map(
    path,
    size,
    stride,
    offset=0,
    numel=None,
    storage='HalfStorage',
    member_bytes=None,
    compress=zipfile.ZIP_STORED,
    values=None,
    member_size=None,
):
    """Write a ``.pt`` file holding one tensor of ``size`` / ``stride`` / ``offset`` over a storage that declares
    ``numel`` values (default: exactly what the view reaches); the member ``data/0`` holds ``member_bytes`` bytes
    (default: ``numel`` values, see :func:`member_values`), written with ``compress``; ``member_size`` (bytes)
    writes a member of that many zero bytes instead, streamed (a zip bomb when deflated). Returns ``path``."""
    numel = reach(size, stride, offset) if numel is None else numel
    store = _Storage(storage, numel)
    data_pkl = _pickle(_Tensor(store, offset, size, stride), [store])
    if member_bytes is None and member_size is None:
        member_bytes = member_values(numel, storage, values)
    return _archive(path, data_pkl, {'0': member_bytes}, compress, member_size)


def craft_tensors(path, tensors, members, last_only=False):
    """A ``.pt`` file holding a list of tensors (or with ``last_only`` the last alone, the others built first and
    dropped): ``tensors`` is ``[(storage, numel, key, size, stride, offset)]``, ``members`` ``{key: bytes}``; two
    tensors may name one key with different dtypes and sizes. Returns ``path``."""
    storages = [_Storage(storage, numel, key) for storage, numel, key, *_ in tensors]
    objects = [_Tensor(s, offset, size, stride) for s, (*_, size, stride, offset) in zip(storages, tensors)]
    return _archive(path, _pickle(objects, storages, last_only), members)


def memo_bomb(path):
    """A ``torch.save`` archive (363 bytes) whose ``data.pkl`` is ``PROTO 2, NONE, LONG_BINPUT 2**26, STOP``: CPython's
    C unpickler grows its memo to 2**26 entries (512 MB, then a copy) for it. Returns ``path``."""
    return _archive(path, b'\x80\x02N' + b'r' + struct.pack('<I', 1 << 26) + b'.', {})


def craft_npy(path, shape, dtype, data: bytes, fortran=False, version=(1, 0)):
    """An ``.npy`` file whose header (written by numpy) declares ``shape`` / ``dtype`` over ``data``."""
    with open(path, 'wb') as f:
        header = dict(descr=np.lib.format.dtype_to_descr(np.dtype(dtype)), fortran_order=fortran, shape=tuple(shape))
        write = np.lib.format.write_array_header_1_0 if version == (1, 0) else np.lib.format.write_array_header_2_0
        write(f, header)
        f.write(data)
    return path

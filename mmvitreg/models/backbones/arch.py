"""mmpretrain's ``arch`` rule for the backbones built through its constructors, with errors that name the fix."""

from typing import Collection, Mapping, Union


class BackboneValueError(ValueError, AssertionError):
    """A bad argument or input of a backbone that mmpretrain rejects with an ``assert``: its message starts with
    mmpretrain's wording, then names the fix; an ``AssertionError`` too, so code written for mmpretrain catches it.
    """


def check_arch(
    arch: Union[str, dict], arch_zoo: Mapping[str, dict], essential: Collection[str], optional: Collection[str] = ()
) -> dict:
    """The settings of ``arch``: a key of ``arch_zoo`` (any case) or a dict with every ``essential`` key and
    any of ``optional``.

    Raises:
        BackboneValueError: an unknown name, or a dict that misses an essential key or has another key.
    """
    if isinstance(arch, str):
        if arch.lower() not in arch_zoo:
            raise BackboneValueError(
                f'Arch {arch} is not in default archs {sorted(arch_zoo)}: choose one of '
                f'them or give a dict with the keys {sorted(essential)}'
            )
        return arch_zoo[arch.lower()]
    if not isinstance(arch, Mapping):
        raise BackboneValueError(
            f'Custom arch needs a dict with keys {sorted(essential)}, got '
            f'{type(arch).__name__}: give a dict or one of {sorted(arch_zoo)}'
        )
    missing = sorted(set(essential) - set(arch))
    unknown = sorted(set(arch) - set(essential) - set(optional))
    if missing or unknown:
        allowed = f' (and optionally {sorted(optional)})' if optional else ''
        fixes = [f'add the missing keys {missing}'] * bool(missing)
        fixes += [f'remove the unknown keys {unknown}'] * bool(unknown)
        raise BackboneValueError(
            f'Custom arch needs a dict with keys {sorted(essential)}{allowed}: ' + ' and '.join(fixes)
        )
    return dict(arch)


def check_drop_path_rate(rate: float):
    """Check that ``rate`` is a stochastic-depth rate, in ``[0, 1)``: a kept branch is scaled by ``1 / (1 - rate)``,
    which a negative rate makes a random rescaling and 1 or more a division by zero or a sign flip.

    Raises:
        BackboneValueError: ``rate`` outside ``[0, 1)``.
    """
    if not 0 <= rate < 1:
        raise BackboneValueError(
            f'drop_path_rate must be in [0, 1) (the share of residual branches dropped at the '
            f'last block), got {rate}: set e.g. 0.1, the DeiT-S recipe\'s'
        )

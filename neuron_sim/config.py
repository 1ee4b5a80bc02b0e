"""Settings of the whole project, each declared once with type, default, valid values and help.

`Setting` is the one declaration form and `Setting.read` the one parser: `neuron_sim` declares
its settings here and in `nki/settings.py`, `torch_neuronx.settings` declares the device's with
the same class (this module stays torch-free). Values are read from the environment at call
time (never cached), so tests can flip them. `check_all()` validates every declared setting at
once; torch_neuronx calls it at import and turns a bad value into an error at first device use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .hardware.chips import CHIP_NAMES

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingError(ValueError):
    """An environment variable holds a value the project cannot use."""


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type                       # bool, int or str
    default: object
    help: str
    choices: tuple = ()              # valid values (empty: any value of `kind`)
    minimum: int | None = None       # smallest valid int
    case_insensitive: bool = False   # str choices match whatever the case (log levels)

    def valid_values(self) -> str:
        if self.kind is bool:
            return "0/1, true/false, yes/no or on/off"
        if self.choices:
            return ", ".join(str(c) for c in self.choices)
        if self.kind is int:
            return "an integer" + (f" >= {self.minimum}" if self.minimum is not None else "")
        return "any text"

    def read(self, environ=None):
        """The value of the variable in `environ` (default os.environ), parsed; an empty or unset
        variable gives the default. Raises SettingError naming the variable and its valid values."""
        raw = (os.environ if environ is None else environ).get(self.name)
        if raw is None or raw.strip() == "":
            return self.default
        text = raw.strip()
        if self.kind is bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise self._error(raw, "is not a boolean")
        if self.kind is int:
            try:
                value = int(text)
            except ValueError:
                raise self._error(raw, "is not an integer") from None
            if self.minimum is not None and value < self.minimum:
                raise self._error(raw, "is too small")
        else:
            value = text
        if self.choices:
            if self.case_insensitive and isinstance(value, str):
                matches = [c for c in self.choices if c.lower() == value.lower()]
                if matches:
                    return matches[0]
            elif value in self.choices:
                return value
            raise self._error(raw, "is not valid")
        return value

    def _error(self, raw: str, what: str) -> SettingError:
        return SettingError(f"{self.name}={raw!r} {what}; valid values: {self.valid_values()}. "
                            f"Fix or unset the environment variable {self.name}.")


# name -> Setting, and part -> [Setting], in declaration order (the README table's order).
_BY_NAME: dict[str, Setting] = {}
_PARTS: dict[str, list[Setting]] = {}


def declare(part: str, *settings: Setting) -> dict[str, Setting]:
    """Registers `settings` as read by `part` (a README column); a name declared twice with a
    different declaration is a programming error."""
    for s in settings:
        known = _BY_NAME.get(s.name)
        if known is not None and known != s:
            raise RuntimeError(f"setting {s.name} is declared twice, differently")
        _BY_NAME[s.name] = s
        listed = _PARTS.setdefault(part, [])
        if s not in listed:
            listed.append(s)
    return {s.name: s for s in settings}


def _load_declarations() -> None:
    from .nki import settings as _nki  # noqa: F401  declares the NKI front end's settings


def declared() -> list[tuple[str, list[Setting]]]:
    """(part, settings) for every part that declared settings so far."""
    _load_declarations()
    return [(part, list(ss)) for part, ss in _PARTS.items()]


def get(name: str, environ=None):
    _load_declarations()
    return _BY_NAME[name].read(environ)


def check_all(environ=None) -> list[str]:
    """The error message of every declared setting whose value is invalid (empty: all fine)."""
    _load_declarations()
    errors = []
    for s in _BY_NAME.values():
        try:
            s.read(environ)
        except SettingError as e:
            errors.append(str(e))
    return errors


# Read by the device and by the torch-free Neuron tools (neuron-ls, neuron-top).
declare(
    "device",
    Setting("NEURON_SIM_INSTANCE", str, "trn2.3xlarge",
            "Simulated instance (trn2.3xlarge, trn2.48xlarge, trn3.48xlarge, trn1.32xlarge, ...; "
            "`torch_neuronx.list_instances()`), checked when the device starts."),
)

declare(
    "simulator",
    Setting("NEURON_SIM_REFERENCE", bool, False,
            "Run the timing model, and the program builder's dependency finding, through the "
            "pure-Python references instead of the numba kernels (slow; for debugging and for "
            "checking the kernels)."),
    Setting("NEURON_SIM_DEFAULT_CHIP", str, "trn2",
            "Chip used when a caller does not name one (roofline_ns, ProgramBuilder(), the "
            "lowering API).", choices=CHIP_NAMES, case_insensitive=True),
    Setting("NEURON_SIM_PROGRESS", str, "auto",
            "Progress bars on stderr (tqdm) for long host work: lowering a cold model, NKI "
            "simulations, calibration, benchmarks; auto shows them when stderr is a terminal, "
            "after 1 s.",
            choices=("auto", "on", "off"), case_insensitive=True),
)

"""Which vLLM model serves a requested model name.

An alias (``policy``) points at one adapter version, or at the base model. The
table is static for now (from settings or a JSON file); the serving controller
will call :meth:`RoutingTable.set` when it promotes or rolls back a version.
Version ``vN`` is served on vLLM under the name ``<adapter_prefix>-vN``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from serving.settings import ProxySettings

VERSION_RE = re.compile(r"^v[0-9]+$")


class UnknownModel(LookupError):
    pass


@dataclass(frozen=True)
class Route:
    model: str  # the model name on vLLM
    adapter_version: str | None  # None: the base model


class RoutingTable:
    def __init__(self, base_model: str, aliases: dict[str, str | None], adapter_prefix: str = "policy"):
        self.base_model = base_model
        self.adapter_prefix = adapter_prefix
        self._lock = threading.Lock()
        self._aliases: dict[str, str | None] = {}
        for alias, version in aliases.items():
            self.set(alias, version)

    @classmethod
    def from_settings(cls, settings: ProxySettings) -> RoutingTable:
        aliases = {settings.policy_alias: settings.policy_version}
        if settings.routing_file is not None:
            aliases = load_routing_file(settings.routing_file)
        return cls(settings.base_model, aliases, settings.adapter_prefix)

    def adapter_name(self, version: str) -> str:
        return f"{self.adapter_prefix}-{version}"

    def set(self, alias: str, version: str | None) -> None:
        """Point ``alias`` at adapter ``version`` (``None``: the base model)."""
        if version is not None and not VERSION_RE.match(version):
            raise ValueError(f"adapter version {version!r} must look like v7")
        if alias == self.base_model:
            raise ValueError(f"alias {alias!r} is the base model's name")
        with self._lock:
            self._aliases[alias] = version

    def snapshot(self) -> dict[str, str | None]:
        with self._lock:
            return dict(self._aliases)

    def resolve(self, model: str) -> Route:
        """The route for a requested model: an alias, the base model, or an adapter by its vLLM name."""
        with self._lock:
            if model in self._aliases:
                version = self._aliases[model]
                return Route(self.adapter_name(version), version) if version else Route(self.base_model, None)
        if model == self.base_model:
            return Route(model, None)
        prefix, _, version = model.rpartition("-")
        if prefix == self.adapter_prefix and VERSION_RE.match(version):
            return Route(model, version)
        known = sorted([*self.snapshot(), self.base_model])
        raise UnknownModel(
            f"model {model!r} is not served here; ask for one of {known} or {self.adapter_prefix}-vN"
        )


def load_routing_file(path: Path) -> dict[str, str | None]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not all(isinstance(v, str | None) for v in data.values()):
        raise ValueError(f"{path}: expected a JSON object of alias -> adapter version (or null)")
    return data
